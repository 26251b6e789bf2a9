#include "sse/sse_parser.h"

#include <cstring>

namespace tahua {

void SseParser::reset() {
  line_.clear();
  data_.clear();
  data_in_view_ = false;
  event_.clear();
  id_.clear();
  has_data_ = false;
  skip_lf_ = false;
  at_stream_start_ = true;
  overflow_ = false;
}

bool SseParser::feed(std::string_view bytes, SseSink& sink) {
  if (overflow_) return false;
  const char* p = bytes.data();
  const char* end = p + bytes.size();
  if (skip_lf_ && p < end) {
    if (*p == '\n') ++p;
    skip_lf_ = false;
  }
  if (at_stream_start_ && p < end) {
    // A UTF-8 BOM may open the stream; it can itself arrive split.
    static constexpr std::string_view kBom = "\xEF\xBB\xBF";
    std::size_t have = line_.size();
    std::size_t take = std::min<std::size_t>(kBom.size() - have, static_cast<std::size_t>(end - p));
    if (std::string_view(line_) == kBom.substr(0, have) && std::memcmp(p, kBom.data() + have, take) == 0) {
      line_.append(p, take);
      p += take;
      if (line_.size() < kBom.size()) return true;  // wait for the rest
      line_.clear();
      at_stream_start_ = false;
    } else {
      at_stream_start_ = false;
    }
  }
  // Line ends are found with memchr (vectorised), not byte by byte: the parser looks at
  // every event a stream relays. A "\r" is rare (upstreams end lines with "\n"), so it
  // is searched once per feed and again only after one was passed.
  const char* next_cr = static_cast<const char*>(std::memchr(p, '\r', static_cast<std::size_t>(end - p)));
  while (p < end) {
    const char* eol = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
    if (!eol) eol = end;
    if (next_cr && next_cr < p) next_cr = static_cast<const char*>(std::memchr(p, '\r', static_cast<std::size_t>(end - p)));
    if (next_cr && next_cr < eol) eol = next_cr;
    if (eol == end) {
      if (line_.size() + static_cast<std::size_t>(end - p) > max_event_bytes_) {
        overflow_ = true;
        return false;
      }
      line_.append(p, end);
      keepData();
      return true;
    }
    // Where this line (and so an event it ends) stops in `bytes`; a "\r" last in the
    // buffer whose "\n" comes in the next feed counts as the end.
    event_end_ = static_cast<std::size_t>(eol - bytes.data()) + 1 +
                 (*eol == '\r' && eol + 1 < end && eol[1] == '\n' ? 1 : 0);
    if (line_.empty()) {
      processLine(std::string_view(p, static_cast<std::size_t>(eol - p)), true, sink);
    } else {
      line_.append(p, eol);
      processLine(line_, false, sink);
      line_.clear();
    }
    if ((data_in_view_ ? data_view_.size() : data_.size()) > max_event_bytes_) {
      overflow_ = true;
      return false;
    }
    if (*eol == '\r') {
      if (eol + 1 == end) {
        skip_lf_ = true;
        keepData();
        return true;
      }
      if (eol[1] == '\n') ++eol;
    }
    p = eol + 1;
  }
  keepData();
  return true;
}

void SseParser::processLine(std::string_view line, bool stable, SseSink& sink) {
  if (line.empty()) {
    dispatch(sink);
    return;
  }
  if (line.front() == ':') {
    line.remove_prefix(1);
    if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    sink.onComment(line);
    return;
  }
  std::string_view field = line;
  std::string_view value;
  if (auto colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (!has_data_ && stable) {
      data_view_ = value;  // valid until this feed returns (see keepData)
      data_in_view_ = true;
    } else {
      keepData();
      if (has_data_) data_.push_back('\n');
      data_.append(value);
    }
    has_data_ = true;
  } else if (field == "event") {
    event_.assign(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) id_.assign(value);
  }
  // "retry" and unknown fields are ignored, as the format prescribes.
}

void SseParser::dispatch(SseSink& sink) {
  if (has_data_) {
    sink.onEvent(SseEvent{event_, data_in_view_ ? data_view_ : std::string_view(data_), id_});
  }
  data_.clear();
  data_in_view_ = false;
  event_.clear();
  has_data_ = false;
}

}  // namespace tahua
