// The AWS event-stream framing (application/vnd.amazon.eventstream), used by Bedrock's
// ConverseStream / InvokeModelWithResponseStream. One message:
//
//   total length (u32 BE) | headers length (u32 BE) | prelude CRC32 (of the 8 bytes before)
//   headers (headers length bytes) | payload | message CRC32 (of everything before it)
//
// A header is: name length (u8) | name | value type (u8) | value, the value's size given
// by its type (strings and byte arrays: u16 BE length + bytes). All integers big-endian.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/error.h"

namespace tahua {

enum class EventStreamHeaderType : std::uint8_t {
  BoolTrue = 0,
  BoolFalse = 1,
  Byte = 2,
  Short = 3,
  Integer = 4,
  Long = 5,
  ByteArray = 6,
  String = 7,
  Timestamp = 8,  // milliseconds since the epoch, i64
  Uuid = 9,       // 16 raw bytes
};

struct EventStreamHeader {
  std::string name;
  EventStreamHeaderType type = EventStreamHeaderType::String;
  std::string bytes;        // String, ByteArray, Uuid: the raw value
  std::int64_t number = 0;  // Bool (1/0), Byte, Short, Integer, Long, Timestamp

  static EventStreamHeader string(std::string name, std::string value) {
    return {std::move(name), EventStreamHeaderType::String, std::move(value), 0};
  }
};

struct EventStreamMessage {
  std::vector<EventStreamHeader> headers;
  std::string payload;

  // The value of a string header, or nullptr (absent or not a string).
  const std::string* stringHeader(std::string_view name) const;
};

// Limits from the AWS event-stream specification.
inline constexpr std::size_t kEventStreamMinMessageBytes = 16;  // prelude + message CRC
inline constexpr std::size_t kEventStreamMaxHeadersBytes = 128 * 1024;
inline constexpr std::size_t kEventStreamDefaultMaxMessageBytes = 16 * 1024 * 1024;

// One encoded message. An Error (Internal) if a header name is empty or over 255 bytes,
// a string/byte-array value over 65535 bytes, a Uuid value not 16 bytes, or the result
// over the format's limits.
std::variant<std::string, Error> encodeEventStreamMessage(std::span<const EventStreamHeader> headers,
                                                          std::string_view payload);

// Incremental decoder: any split of the byte stream gives the same messages. Every length
// and both CRCs are checked before a message is delivered; the first corruption is
// reported as an UpstreamBadResponse naming what was wrong and where, and the decoder
// then stays failed (every later feed() returns that error).
class EventStreamDecoder {
 public:
  // Returning an Error stops decoding: feed() returns it and the decoder stays failed.
  using Handler = std::function<std::optional<Error>(const EventStreamMessage&)>;

  explicit EventStreamDecoder(std::size_t max_message_bytes = kEventStreamDefaultMaxMessageBytes);

  std::optional<Error> feed(std::string_view bytes, const Handler& on_message);

  // Bytes of an unfinished message are buffered (the stream would be truncated here).
  bool midMessage() const { return buffer_.size() > consumed_; }
  bool failed() const { return error_.has_value(); }
  std::uint64_t messagesDecoded() const { return messages_; }

 private:
  std::optional<Error> fail(std::string message);

  std::size_t max_message_bytes_;
  std::string buffer_;
  std::size_t consumed_ = 0;       // bytes of buffer_ already decoded
  std::uint64_t stream_offset_ = 0;  // stream position of buffer_[consumed_]
  std::uint64_t messages_ = 0;
  std::optional<Error> error_;
};

}  // namespace tahua
