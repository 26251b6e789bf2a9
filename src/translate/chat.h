// The canonical form every translation goes through. When the client's API and the
// provider's wire format differ (an Anthropic-SDK client reaching Gemini, an OpenAI
// client reaching Bedrock), the request is first brought into OpenAI chat-completions
// shape (a boost::json::object), then encoded for the vendor; the vendor's answer is
// decoded into ChatResult / ChatChunk and encoded for the client's API. Same-format
// pairs (OpenAI -> openai, Anthropic -> anthropic) never come here: they pass through.
//
// A vendor codec is a pure translation (no sockets): request JSON in, request bytes out;
// response bytes in, canonical structs out. So each is unit-tested with golden fixtures.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <boost/json/object.hpp>

#include "core/error.h"
#include "core/usage.h"

namespace tahua {

struct ToolCall {
  std::string id;         // "call_..." / "toolu_..." as the vendor named it
  std::string name;
  std::string arguments;  // a JSON text (object), as OpenAI carries it
};

// A whole (non-streaming) answer.
struct ChatResult {
  std::string id;      // vendor id; the encoders invent one if empty
  std::string model;   // as the vendor reported it (may be empty)
  std::string content;  // assistant text (text parts joined)
  std::vector<ToolCall> tool_calls;
  // OpenAI's vocabulary: "stop", "length", "tool_calls", "content_filter".
  std::string finish_reason = "stop";
  Usage usage;
};

// One increment of a stream. Any field may be empty; a vendor event that carries
// nothing the client needs (Anthropic's `ping`) produces no chunk.
struct ToolCallDelta {
  int index = 0;          // position among this answer's tool calls (0, 1, ...)
  std::string id;         // set on the first delta of a call
  std::string name;       // set on the first delta of a call
  std::string arguments;  // a fragment of the JSON arguments text
};

struct ChatChunk {
  bool start = false;       // first chunk: the assistant's turn begins
  std::string id;           // vendor message id, when known (first chunk)
  std::string model;        // vendor model name, when known
  std::string content;      // text delta
  std::vector<ToolCallDelta> tool_calls;
  std::string finish_reason;  // set once, on the chunk that ends the turn
  std::optional<Usage> usage;  // may come with any chunk; later ones replace earlier
};

class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  virtual void onChunk(const ChatChunk& chunk) = 0;
};

// The vendor's error answer, decoded: status and a message safe to show the client.
struct UpstreamErrorInfo {
  int status = 502;
  std::string type;     // vendor error type/code if any ("overloaded_error", "RESOURCE_EXHAUSTED")
  std::string message;  // vendor message (the gateway scrubs secrets before use)
};

// Incremental decoder of one vendor's streaming body (SSE, AWS event-stream, ...).
// feed() may be called with the bytes split anywhere; it emits chunks as soon as an
// event is complete. A vendor error event inside the stream is reported as an Error.
class ChatStreamDecoder {
 public:
  virtual ~ChatStreamDecoder() = default;
  virtual std::optional<Error> feed(std::string_view bytes, ChunkSink& sink) = 0;
  // The upstream closed the stream. An Error if it ended before the vendor's own end
  // marker (a truncated stream), for formats that have one.
  virtual std::optional<Error> finish(ChunkSink& sink) = 0;
  // The longest event the upstream may send (server.max_stream_event_bytes), for
  // decoders of line-based formats.
  virtual void setMaxEventBytes(std::size_t) {}
};

// The upstream sent a stream event (or a line) longer than `limit`: its fault.
Error streamEventTooLarge(std::size_t limit);

// What a vendor codec needs to know beyond the canonical request.
struct EncodeOptions {
  std::string upstream_model;  // the vendor's model / deployment / model id
  bool stream = false;
  std::int64_t default_max_tokens = 4096;  // for vendors that require max_tokens
  // OpenAI-format streams: ask for usage (stream_options); off for a server that refuses it.
  bool stream_usage = true;
};

// The upstream request, minus the transport's own headers (Host, Content-Length) and the
// credentials (added by the adapter, which owns the provider config).
struct EncodedRequest {
  std::string path;   // relative to the provider's base path, query included
  std::string body;
  std::string content_type = "application/json";
  std::string accept = "application/json";
};

class VendorCodec {
 public:
  virtual ~VendorCodec() = default;
  // canonical OpenAI chat request -> vendor request. An Error (InvalidRequest, naming the
  // parameter) for what the vendor cannot express.
  virtual std::variant<EncodedRequest, Error> encodeRequest(const boost::json::object& chat,
                                                            const EncodeOptions& options) const = 0;
  virtual std::variant<ChatResult, Error> decodeResponse(std::string_view body) const = 0;
  virtual std::unique_ptr<ChatStreamDecoder> streamDecoder() const = 0;
  virtual UpstreamErrorInfo decodeError(int status, std::string_view body) const = 0;
};

// Helpers shared by codecs.
// A JSON text -> object, or an UpstreamBadResponse error naming `what`.
std::variant<boost::json::object, Error> parseJsonObject(std::string_view text, std::string_view what);
// "call_" + 24 random alphanumerics (ids for tool calls a vendor did not name).
std::string randomId(std::string_view prefix, std::size_t length = 24);

}  // namespace tahua
