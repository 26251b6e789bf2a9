#include "http/multipart.h"

#include <string.h>

#include <algorithm>
#include <cctype>

namespace tahua {
namespace {

// The body is scanned as if it started with a CRLF, so that the first delimiter needs
// no case of its own; offsets in FormPart are of the real body.
constexpr std::uint64_t kVirtualPrefix = 2;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// One `; name=value` parameter list (RFC 7578 4.2: quoted strings, backslash escapes).
// Calls `on(name, value)` per parameter; false when malformed.
template <class F>
bool forEachParam(std::string_view s, F&& on) {
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ';' || s[i] == ' ' || s[i] == '\t')) ++i;
    if (i >= s.size()) break;
    const std::size_t name_start = i;
    while (i < s.size() && s[i] != '=' && s[i] != ';') ++i;
    const std::string_view name = trim(s.substr(name_start, i - name_start));
    std::string value;
    if (i < s.size() && s[i] == '=') {
      ++i;
      while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
      if (i < s.size() && s[i] == '"') {
        ++i;
        bool closed = false;
        while (i < s.size()) {
          if (s[i] == '\\' && i + 1 < s.size()) {
            value += s[i + 1];
            i += 2;
          } else if (s[i] == '"') {
            ++i;
            closed = true;
            break;
          } else {
            value += s[i++];
          }
        }
        if (!closed) return false;
      } else {
        const std::size_t v = i;
        while (i < s.size() && s[i] != ';') ++i;
        value = std::string(trim(s.substr(v, i - v)));
      }
    }
    if (name.empty()) return false;
    on(name, std::move(value));
  }
  return true;
}

}  // namespace

std::optional<std::string> formBoundary(std::string_view content_type) {
  const std::size_t semi = content_type.find(';');
  if (!iequals(trim(content_type.substr(0, semi)), "multipart/form-data") || semi == std::string_view::npos) return std::nullopt;
  std::optional<std::string> boundary;
  const bool ok = forEachParam(content_type.substr(semi), [&](std::string_view name, std::string value) {
    if (iequals(name, "boundary")) boundary = std::move(value);
  });
  if (!ok || !boundary || boundary->empty() || boundary->size() > 70) return std::nullopt;
  for (char c : *boundary)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) return std::nullopt;
  return boundary;
}

MultipartScanner::MultipartScanner(std::string_view boundary, Limits limits)
    : delimiter_("\r\n--" + std::string(boundary)), limits_(limits), hold_("\r\n") {}

bool MultipartScanner::fail(std::string message) {
  state_ = State::Failed;
  error_ = std::move(message);
  hold_.clear();
  return false;
}

bool MultipartScanner::feed(std::string_view bytes) {
  // Steps while they consume; returns how much of `view` was consumed.
  const auto run = [this](std::string_view view) {
    std::size_t total = 0;
    while (state_ != State::Failed && state_ != State::Done) {
      const std::size_t n = step(view.substr(total), consumed_);
      if (n == 0) break;
      total += n;
      consumed_ += n;
    }
    return total;
  };
  while (state_ != State::Failed && state_ != State::Done) {
    if (hold_.empty()) {
      // The usual case: scanned where it lies; only an undecided tail (a possible
      // delimiter start, a few bytes) is copied.
      if (bytes.empty()) break;
      const std::size_t n = run(bytes);
      if (state_ != State::Failed && state_ != State::Done) hold_.assign(bytes.substr(n));
      break;
    }
    if (bytes.empty()) break;
    // Bytes carried from before, joined with the start of this piece.
    const std::size_t held = hold_.size();
    const std::size_t take = std::min(bytes.size(), std::max<std::size_t>(delimiter_.size(), 4096));
    hold_.append(bytes.substr(0, take));
    const std::size_t n = run(hold_);
    if (state_ == State::Failed || state_ == State::Done) break;
    if (n >= held) {
      // Everything carried is decided: go on in `bytes` itself.
      hold_.clear();
      bytes.remove_prefix(n - held);
    } else {
      hold_.erase(0, n);
      bytes.remove_prefix(take);
    }
  }
  if (state_ == State::Done) hold_.clear();  // the epilogue is ignored
  return state_ != State::Failed;
}

bool MultipartScanner::finish() {
  if (state_ == State::Failed) return false;
  if (state_ != State::Done) return fail("The multipart body ended before its closing boundary.");
  return true;
}

std::size_t MultipartScanner::step(std::string_view view, std::uint64_t at) {
  switch (state_) {
    case State::Preamble:
    case State::Body: return scanBody(view, at);
    case State::AfterDelimiter: {
      if (view.size() < 2) return 0;
      if (view[0] == '-' && view[1] == '-') {
        state_ = State::Done;
        return 2;
      }
      std::size_t i = 0;
      while (i < view.size() && (view[i] == ' ' || view[i] == '\t')) ++i;  // transport padding
      if (i > 64) return fail("A multipart delimiter line is malformed."), 0;
      if (i + 1 >= view.size()) return 0;
      if (view[i] != '\r' || view[i + 1] != '\n') return fail("A multipart delimiter line is malformed."), 0;
      if (parts_.size() >= limits_.max_parts)
        return fail("The form has more than " + std::to_string(limits_.max_parts) + " parts."), 0;
      parts_.emplace_back();
      parts_.back().head_begin = at + i + 2 - kVirtualPrefix;
      state_ = State::Headers;
      return i + 2;
    }
    case State::Headers: {
      std::size_t end = 0;
      std::size_t used = 0;
      if (view.size() >= 2 && view[0] == '\r' && view[1] == '\n') {
        used = 2;  // no header lines at all
      } else {
        end = view.find("\r\n\r\n");
        if (end == std::string_view::npos) {
          // Too large only when the end could no longer fall within the bound (the
          // view may hold the first bytes of the empty line already).
          if (view.size() > limits_.max_head_bytes + 3) return fail("A form part's headers are too large."), 0;
          return 0;
        }
        used = end + 4;
      }
      if (end > limits_.max_head_bytes) return fail("A form part's headers are too large."), 0;
      if (!parseHeaders(view.substr(0, end))) return 0;
      parts_.back().data_begin = at + used - kVirtualPrefix;
      state_ = State::Body;
      return used;
    }
    case State::Done:
    case State::Failed: return 0;
  }
  return 0;
}

std::size_t MultipartScanner::scanBody(std::string_view view, std::uint64_t at) {
  const std::size_t d = delimiter_.size();
  const void* hit = view.size() >= d ? ::memmem(view.data(), view.size(), delimiter_.data(), d) : nullptr;
  const std::size_t content =
      hit ? static_cast<std::size_t>(static_cast<const char*>(hit) - view.data()) : (view.size() >= d ? view.size() - (d - 1) : 0);
  if (state_ == State::Body && !parts_.back().file() && content > 0) {
    text_bytes_ += content;
    if (text_bytes_ > limits_.max_text_bytes)
      return fail("The form's text fields are larger than " + std::to_string(limits_.max_text_bytes) + " bytes."), 0;
    parts_.back().value.append(view.substr(0, content));
  }
  if (!hit) return content;
  if (state_ == State::Body) parts_.back().data_end = at + content - kVirtualPrefix;
  state_ = State::AfterDelimiter;
  return content + d;
}

bool MultipartScanner::parseHeaders(std::string_view lines) {
  FormPart& part = parts_.back();
  bool disposition = false;
  while (!lines.empty()) {
    const std::size_t eol = lines.find("\r\n");
    const std::string_view line = lines.substr(0, eol);
    lines = eol == std::string_view::npos ? std::string_view{} : lines.substr(eol + 2);
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return fail("A form part has a malformed header line.");
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = trim(line.substr(colon + 1));
    if (iequals(name, "content-disposition")) {
      const std::size_t semi = value.find(';');
      if (!iequals(trim(value.substr(0, semi)), "form-data")) return fail("A form part is not form-data.");
      disposition = true;
      if (semi != std::string_view::npos &&
          !forEachParam(value.substr(semi), [&](std::string_view n, std::string v) {
            if (iequals(n, "name")) part.name = std::move(v);
            else if (iequals(n, "filename")) part.filename = std::move(v);
          }))
        return fail("A form part's Content-Disposition is malformed.");
    } else if (iequals(name, "content-type")) {
      part.content_type = std::string(value);
    }
  }
  if (!disposition || part.name.empty()) return fail("A form part has no Content-Disposition name.");
  // A file part without a file name (curl -F 'file=<x') is kept as a file all the same
  // when it says its type is not text.
  if (part.filename.empty() && !part.content_type.empty() && part.content_type.rfind("text/plain", 0) != 0)
    part.filename = part.name;
  return true;
}

}  // namespace tahua
