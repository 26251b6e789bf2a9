// Incremental parser for Server-Sent Events (the WHATWG event-stream format) that
// survives any split of the byte stream: an event or a line cut anywhere (inside a
// multi-byte UTF-8 character too), "\r\n" / "\n" / "\r" line ends (a "\r\n" split
// across two feeds included), comments, multi-line data, a leading BOM.
//
// The gateway relays the original bytes untouched; this parser only observes them
// (usage, errors, end of stream), so it never has to re-encode anything.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tahua {

struct SseEvent {
  std::string_view event;  // "" when the stream did not name one ("message")
  std::string_view data;   // data lines joined with "\n", without the final "\n"
  std::string_view id;
};

class SseSink {
 public:
  virtual ~SseSink() = default;
  virtual void onEvent(const SseEvent& event) = 0;
  // Comment lines (": keep-alive"); most sinks ignore them.
  virtual void onComment(std::string_view) {}
};

class SseParser {
 public:
  // Bounds what one unfinished line or event may hold, so a peer that never sends a
  // line end cannot grow memory without limit. Past it, feed() returns false.
  explicit SseParser(std::size_t max_event_bytes = 8 * 1024 * 1024) : max_event_bytes_(max_event_bytes) {}
  void setMaxEventBytes(std::size_t n) { max_event_bytes_ = n; }
  std::size_t maxEventBytes() const { return max_event_bytes_; }

  // Parses `bytes`, calling the sink for every completed event. Returns false if an
  // event exceeded the size bound (the parser is then unusable until reset()).
  bool feed(std::string_view bytes, SseSink& sink);
  void reset();
  // During SseSink::onEvent: the offset in the bytes of the current feed() just past the
  // blank line that ended the event (so a caller can cut the raw stream at event
  // boundaries without re-encoding it).
  std::size_t eventEnd() const { return event_end_; }
  // True when the bytes fed so far end between events (no unfinished line or event), so
  // a stream cut here stays well-formed.
  bool atEventBoundary() const { return line_.empty() && !has_data_ && event_.empty(); }

 private:
  // `stable`: the line is a view into the bytes of the current feed (not into line_).
  void processLine(std::string_view line, bool stable, SseSink& sink);
  void dispatch(SseSink& sink);
  // Before feed() returns: an unfinished event's data must not point into the caller's bytes.
  void keepData() {
    if (!data_in_view_) return;
    data_.assign(data_view_);
    data_in_view_ = false;
  }

  std::string line_;   // an unfinished line carried to the next feed
  std::string data_;
  // The usual event (one data line, whole within one feed) is not copied: its data is a
  // view into the fed bytes, so a stream keeps no data buffer between events.
  std::string_view data_view_;
  bool data_in_view_ = false;
  std::string event_;
  std::string id_;
  bool has_data_ = false;
  bool skip_lf_ = false;      // the previous feed ended with "\r"
  bool at_stream_start_ = true;
  bool overflow_ = false;
  std::size_t max_event_bytes_;
  std::size_t event_end_ = 0;
};

}  // namespace tahua
