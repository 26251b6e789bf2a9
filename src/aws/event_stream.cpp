#include "aws/event_stream.h"

#include <boost/crc.hpp>

#include <algorithm>
#include <limits>

namespace tahua {
namespace {

constexpr std::size_t kPreludeBytes = 12;  // total length, headers length, prelude CRC
constexpr std::size_t kCrcBytes = 4;

std::uint32_t crc32(std::string_view bytes) {
  boost::crc_32_type crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

std::uint64_t readBigEndian(std::string_view s, std::size_t at, std::size_t width) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < width; ++i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

void appendBigEndian(std::string& out, std::uint64_t v, std::size_t width) {
  for (std::size_t i = width; i-- > 0;) out.push_back(static_cast<char>((v >> (i * 8)) & 0xFF));
}

// Width of a fixed-size value; 0 for bools, npos for length-prefixed or unknown types.
std::size_t fixedWidth(std::uint8_t type) {
  switch (static_cast<EventStreamHeaderType>(type)) {
    case EventStreamHeaderType::BoolTrue:
    case EventStreamHeaderType::BoolFalse: return 0;
    case EventStreamHeaderType::Byte: return 1;
    case EventStreamHeaderType::Short: return 2;
    case EventStreamHeaderType::Integer: return 4;
    case EventStreamHeaderType::Long:
    case EventStreamHeaderType::Timestamp: return 8;
    case EventStreamHeaderType::Uuid: return 16;
    default: return std::string_view::npos;
  }
}

std::int64_t signExtend(std::uint64_t v, std::size_t width) {
  if (width == 0 || width >= 8) return static_cast<std::int64_t>(v);
  const std::uint64_t sign = std::uint64_t{1} << (width * 8 - 1);
  return static_cast<std::int64_t>((v ^ sign) - sign);
}

// A header name as error messages show it. The name is raw upstream bytes, and the
// message reaches the client inside a JSON error event: bytes that are not printable
// ASCII (invalid UTF-8, control characters) are written as \xNN, so that event stays
// valid JSON and the name stays readable.
std::string printableName(std::string_view name) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : name) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7f && b != '\\') {
      out.push_back(c);
    } else {
      out.append("\\x").push_back(kHex[b >> 4]);
      out.push_back(kHex[b & 0xF]);
    }
  }
  return out;
}

// Parses the header block; on failure returns what was wrong.
std::optional<std::string> parseHeaders(std::string_view block, std::vector<EventStreamHeader>& out) {
  std::size_t p = 0;
  while (p < block.size()) {
    const std::size_t name_len = static_cast<unsigned char>(block[p++]);
    if (name_len == 0) return "a header has an empty name";
    if (block.size() - p < name_len + 1) return "a header runs past the header block";
    EventStreamHeader h;
    h.name.assign(block.substr(p, name_len));
    p += name_len;
    const std::uint8_t type = static_cast<unsigned char>(block[p++]);
    h.type = static_cast<EventStreamHeaderType>(type);
    if (type == 6 || type == 7) {  // ByteArray, String
      if (block.size() - p < 2) return "header '" + printableName(h.name) + "' runs past the header block";
      const std::size_t len = readBigEndian(block, p, 2);
      p += 2;
      if (block.size() - p < len) return "header '" + printableName(h.name) + "' runs past the header block";
      h.bytes.assign(block.substr(p, len));
      p += len;
    } else {
      const std::size_t width = fixedWidth(type);
      if (width == std::string_view::npos)
        return "header '" + printableName(h.name) + "' has unknown value type " + std::to_string(type);
      if (block.size() - p < width) return "header '" + printableName(h.name) + "' runs past the header block";
      if (h.type == EventStreamHeaderType::Uuid) {
        h.bytes.assign(block.substr(p, width));
      } else if (width == 0) {
        h.number = h.type == EventStreamHeaderType::BoolTrue ? 1 : 0;
      } else {
        h.number = signExtend(readBigEndian(block, p, width), width);
      }
      p += width;
    }
    out.push_back(std::move(h));
  }
  return std::nullopt;
}

}  // namespace

const std::string* EventStreamMessage::stringHeader(std::string_view name) const {
  for (const auto& h : headers)
    if (h.type == EventStreamHeaderType::String && h.name == name) return &h.bytes;
  return nullptr;
}

std::variant<std::string, Error> encodeEventStreamMessage(std::span<const EventStreamHeader> headers,
                                                          std::string_view payload) {
  auto bad = [](std::string m) { return Error{ErrorKind::Internal, "AWS event-stream encoding: " + std::move(m)}; };
  std::string block;
  for (const auto& h : headers) {
    if (h.name.empty() || h.name.size() > 255) return bad("header name must be 1..255 bytes");
    block.push_back(static_cast<char>(h.name.size()));
    block += h.name;
    const auto type = static_cast<std::uint8_t>(h.type);
    block.push_back(static_cast<char>(type));
    switch (h.type) {
      case EventStreamHeaderType::BoolTrue:
      case EventStreamHeaderType::BoolFalse: break;
      case EventStreamHeaderType::ByteArray:
      case EventStreamHeaderType::String:
        if (h.bytes.size() > 0xFFFF) return bad("header '" + printableName(h.name) + "' value over 65535 bytes");
        appendBigEndian(block, h.bytes.size(), 2);
        block += h.bytes;
        break;
      case EventStreamHeaderType::Uuid:
        if (h.bytes.size() != 16) return bad("header '" + printableName(h.name) + "' uuid must be 16 bytes");
        block += h.bytes;
        break;
      case EventStreamHeaderType::Byte:
      case EventStreamHeaderType::Short:
      case EventStreamHeaderType::Integer:
      case EventStreamHeaderType::Long:
      case EventStreamHeaderType::Timestamp:
        appendBigEndian(block, static_cast<std::uint64_t>(h.number), fixedWidth(type));
        break;
      default: return bad("header '" + printableName(h.name) + "' has an unknown type");
    }
    if (block.size() > kEventStreamMaxHeadersBytes) return bad("headers over 128 KiB");
  }
  const std::size_t total = kPreludeBytes + block.size() + payload.size() + kCrcBytes;
  if (payload.size() > kEventStreamDefaultMaxMessageBytes || total > kEventStreamDefaultMaxMessageBytes)
    return bad("message over 16 MiB");
  std::string out;
  out.reserve(total);
  appendBigEndian(out, total, 4);
  appendBigEndian(out, block.size(), 4);
  appendBigEndian(out, crc32(out), 4);
  out += block;
  out += payload;
  appendBigEndian(out, crc32(out), 4);
  return out;
}

EventStreamDecoder::EventStreamDecoder(std::size_t max_message_bytes)
    : max_message_bytes_(std::max(max_message_bytes, kEventStreamMinMessageBytes)) {}

std::optional<Error> EventStreamDecoder::fail(std::string message) {
  error_ = Error{ErrorKind::UpstreamBadResponse,
                 "Malformed AWS event stream at byte " + std::to_string(stream_offset_) + ": " + std::move(message) + "."};
  buffer_.clear();
  consumed_ = 0;
  return error_;
}

std::optional<Error> EventStreamDecoder::feed(std::string_view bytes, const Handler& on_message) {
  if (error_) return error_;
  // Nothing buffered: decode straight from the caller's bytes and keep only the tail.
  const bool direct = consumed_ == buffer_.size();
  if (direct) {
    buffer_.clear();
    consumed_ = 0;
  } else {
    buffer_.append(bytes);
  }
  const std::string_view data = direct ? bytes : std::string_view(buffer_).substr(consumed_);

  std::size_t pos = 0;
  while (data.size() - pos >= kPreludeBytes) {
    const std::string_view msg = data.substr(pos);
    const std::uint64_t total = readBigEndian(msg, 0, 4);
    const std::uint64_t headers_len = readBigEndian(msg, 4, 4);
    // The prelude CRC first: lengths from a corrupt prelude mean nothing.
    if (crc32(msg.substr(0, 8)) != readBigEndian(msg, 8, 4)) return fail("prelude CRC mismatch");
    if (total < kEventStreamMinMessageBytes)
      return fail("message length " + std::to_string(total) + " is below the 16-byte minimum");
    if (total > max_message_bytes_)
      return fail("message length " + std::to_string(total) + " exceeds the limit of " +
                  std::to_string(max_message_bytes_) + " bytes");
    if (headers_len > total - kEventStreamMinMessageBytes)
      return fail("headers length " + std::to_string(headers_len) + " does not fit in a message of " +
                  std::to_string(total) + " bytes");
    if (headers_len > kEventStreamMaxHeadersBytes)
      return fail("headers length " + std::to_string(headers_len) + " exceeds 128 KiB");
    if (msg.size() < total) break;  // wait for the rest

    const std::size_t body_end = static_cast<std::size_t>(total) - kCrcBytes;
    if (crc32(msg.substr(0, body_end)) != readBigEndian(msg, body_end, 4)) return fail("message CRC mismatch");
    EventStreamMessage m;
    if (auto why = parseHeaders(msg.substr(kPreludeBytes, headers_len), m.headers)) return fail(std::move(*why));
    m.payload.assign(msg.substr(kPreludeBytes + headers_len, body_end - kPreludeBytes - headers_len));

    pos += total;
    stream_offset_ += total;
    ++messages_;
    if (auto err = on_message(m)) {
      error_ = std::move(err);
      buffer_.clear();
      consumed_ = 0;
      return error_;
    }
  }

  if (direct) {
    buffer_.assign(data.substr(pos));
  } else {
    consumed_ += pos;
    // Drop decoded bytes once they are the larger part, so a long stream stays O(n).
    if (consumed_ == buffer_.size()) {
      buffer_.clear();
      consumed_ = 0;
    } else if (consumed_ * 2 >= buffer_.size()) {
      buffer_.erase(0, consumed_);
      consumed_ = 0;
    }
  }
  return std::nullopt;
}

}  // namespace tahua
