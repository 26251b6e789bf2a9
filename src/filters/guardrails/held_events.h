// A guarded stream's events between the upstream and the client: the bytes from the first
// event still held on (the held events, then an event not complete yet), in one buffer
// rather than a string an event — no allocation and no copy an event, a run of released
// events leaves in one append, and a one-line event is read where it lies (simdjson's
// padding is kept readable past the end: chat_event_texts.h).
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>

#include <boost/container/small_vector.hpp>

namespace tahua::guardrail_stream {

// Where a text an event carries lies in its channel's text.
struct Segment {
  std::size_t channel;  // index into the filter's channels
  std::size_t begin, end;
};

struct HeldEvent {
  std::size_t begin, end;  // its bytes (with its blank line), as stream offsets
  boost::container::small_vector<Segment, 2> segments;  // nearly always one: no allocation
  bool full = false;  // repeats whole texts (Responses' done events)
};

class HeldEvents {
 public:
  // What release() does with the first held event.
  enum class Release { Wait, AsItCame, Rewritten };

  // A read's bytes, after the ones before.
  void append(std::string_view bytes);
  // Calls event(begin, end) for each complete event not seen yet, in order ([begin, end):
  // stream offsets, its blank line included), until it returns false; with `last`, the
  // bytes after the last complete event are one more.
  template <class F>
  void events(bool last, F&& event);
  std::string_view raw(const HeldEvent& ev) const { return std::string_view(bytes_).substr(ev.begin - base_, ev.end - ev.begin); }

  void hold(HeldEvent ev) {
    held_bytes_ += ev.end - ev.begin;
    held_.push_back(std::move(ev));
  }
  std::size_t heldBytes() const { return held_bytes_; }

  // Lets the held events go, in order, to `out`: decide(ev) says whether the first one
  // waits, goes as it came (a run of them is one append) or is rewritten by
  // rewrite(ev, out), which returns false to keep it (and everything after it) held.
  template <class Decide, class Rewrite>
  void release(std::string& out, Decide&& decide, Rewrite&& rewrite);
  // Forgets the bytes before the first event still held (or the incomplete one).
  void forgetReleased();
  // Forgets everything held and pending (a block, an abort).
  void drop();

 private:
  std::string bytes_;
  std::size_t base_ = 0;     // stream offset of bytes_[0]
  std::size_t scanned_ = 0;  // stream offset where the incomplete event begins
  std::deque<HeldEvent> held_;
  std::size_t held_bytes_ = 0;
};

template <class F>
void HeldEvents::events(bool last, F&& event) {
  std::size_t pos = scanned_ - base_;
  // The first "\r\n\r\n" at or after pos, searched again only once pos has passed it
  // (searched for every event, a whole answer in one piece was scanned to its end each
  // time: most streams have none).
  std::size_t crlf = bytes_.find("\r\n\r\n", pos);
  bool more = true;
  for (;;) {
    const std::size_t lf = bytes_.find("\n\n", pos);
    if (crlf != std::string::npos && crlf < pos) crlf = bytes_.find("\r\n\r\n", pos);
    if (lf == std::string::npos && crlf == std::string::npos) break;
    const std::size_t end = crlf < lf ? crlf + 4 : lf + 2;
    more = event(base_ + pos, base_ + end);
    pos = end;
    if (!more) break;
  }
  if (last && more && pos < bytes_.size()) {
    event(base_ + pos, base_ + bytes_.size());
    pos = bytes_.size();
  }
  scanned_ = base_ + pos;
}

template <class Decide, class Rewrite>
void HeldEvents::release(std::string& out, Decide&& decide, Rewrite&& rewrite) {
  std::size_t run_begin = 0, run_end = 0;
  auto flush = [&] {
    if (run_end > run_begin) out.append(bytes_, run_begin - base_, run_end - run_begin);
    run_begin = run_end = 0;
  };
  while (!held_.empty()) {
    HeldEvent& ev = held_.front();
    const Release what = decide(ev);
    if (what == Release::Wait) break;
    if (what == Release::Rewritten) {
      flush();
      if (!rewrite(ev, out)) return;
    } else {
      if (run_end != ev.begin) {
        flush();
        run_begin = ev.begin;
      }
      run_end = ev.end;
    }
    held_bytes_ -= ev.end - ev.begin;
    held_.pop_front();
  }
  flush();
}

}  // namespace tahua::guardrail_stream
