// The fields the records (access log, usage record) carry beyond a request's own: their
// names and kinds. A leaf header: the telemetry formatters, which run off the worker,
// name the fields without the request's context.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tahua {

// What the records (access log, usage record) say about a request beyond its own
// fields, set by the filter that knows: the prompt template used ("id@version"); a
// cache's or a guardrail's verdict as those arrive. Each is a key of the usage record
// (null when unset) and of the access log line (when set).
// A field is a string, or (recordFieldNumeric) a number written as its digits.
enum class RecordField : std::uint8_t {
  Prompt, Cache, CacheTokensSaved, Guardrails, GuardrailSignals, GuardrailsUnchecked, Quality, QualitySimilarity, McpMethod, McpTool,
  McpOutcome, McpArguments, Count
};
constexpr std::string_view recordFieldName(RecordField f) {
  switch (f) {
    case RecordField::Prompt: return "prompt";
    case RecordField::Cache: return "cache";  // hit, miss, bypass, refresh
    case RecordField::CacheTokensSaved: return "cache_tokens_saved";  // a hit's tokens not spent upstream
    case RecordField::Guardrails: return "guardrails";  // "policy/rule:action,..." of the rules that matched
    // "policy/rule:score:signal+signal,..." of the injection rules that saw a signal (hit or not)
    case RecordField::GuardrailSignals: return "guardrail_signals";
    case RecordField::GuardrailsUnchecked: return "guardrails_unchecked";  // "policy/rule:stage,..." of moderation calls with no verdict
    case RecordField::Quality: return "quality";  // the answer-quality check: ok, low, unchecked, pending
    case RecordField::QualitySimilarity: return "quality_similarity";  // its cosine similarity
    case RecordField::McpMethod: return "mcp_method";  // the JSON-RPC method of an /mcp request
    case RecordField::McpTool: return "mcp_tool";      // a tools/call's tool, "server__tool"
    // ok, error (a JSON-RPC error), tool_error (isError), unknown_tool, invalid_arguments,
    // server_unavailable, too_large, failed
    case RecordField::McpOutcome: return "mcp_outcome";
    case RecordField::McpArguments: return "mcp_arguments";  // its arguments as JSON (mcp.audit_arguments)
    case RecordField::Count: break;
  }
  return "";
}
constexpr bool recordFieldNumeric(RecordField f) { return f == RecordField::CacheTokensSaved || f == RecordField::QualitySimilarity; }
constexpr std::size_t kRecordFieldCount = static_cast<std::size_t>(RecordField::Count);

}  // namespace tahua
