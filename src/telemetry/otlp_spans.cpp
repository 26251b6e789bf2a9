#include "telemetry/otlp_spans.h"

#include <charconv>

namespace tahua {
namespace {

void serverSpan(const SpanRecordReader& r, SpanSink& w) {
  const ServerSpan& s = r.server();
  const std::string_view method = r.text(s.method), path = r.text(s.path);
  w.beginSpan({&s.trace_id, &s.span_id, s.continued ? &s.parent_id : nullptr, method, path, SpanKind::Server, s.start_ns, s.end_ns});
  w.str("http.request.method", method);
  w.str("url.path", path);
  w.integer("http.response.status_code", s.status);
  w.str("tahua.request_id", r.text(s.request_id));
  if (s.has_endpoint) {
    w.str("gen_ai.operation.name", s.operation.view());
    if (s.request_model.size) w.str("gen_ai.request.model", r.text(s.request_model));
    if (s.provider_type.size) w.str("gen_ai.provider.name", genAiProviderName(r.text(s.provider_type)));
  }
  if (s.response_model.size) w.str("gen_ai.response.model", r.text(s.response_model));
  if (s.max_tokens > 0) w.integer("gen_ai.request.max_tokens", s.max_tokens);
  if (s.temperature >= 0) w.dbl("gen_ai.request.temperature", s.temperature);
  if (s.prompt_tokens >= 0) w.integer("gen_ai.usage.input_tokens", s.prompt_tokens);
  if (s.completion_tokens >= 0) w.integer("gen_ai.usage.output_tokens", s.completion_tokens);
  if (s.finish_reason.size) w.strList("gen_ai.response.finish_reasons", s.finish_reason.view());
  if (s.first_byte_ns) w.dbl("gen_ai.server.time_to_first_token", static_cast<double>(s.first_byte_ns - s.start_ns) / 1e9);
  w.boolean("tahua.stream", s.streaming);
  if (s.model.size) w.str("tahua.model", r.text(s.model));
  if (s.route.size) w.str("tahua.route", r.text(s.route));
  if (s.route_reason.size) w.str("tahua.route_reason", r.text(s.route_reason));
  if (s.deployment_id.size) {
    w.str("tahua.deployment", r.text(s.deployment_id));
    w.str("tahua.version", r.text(s.deployment_version));
  }
  if (s.tenant.size) w.str("tahua.tenant", r.text(s.tenant));
  if (s.key.size) w.str("tahua.key", r.text(s.key));
  if (s.fallback.size) w.str("tahua.fallback", r.text(s.fallback));
  w.integer("tahua.attempts", s.attempts);
  w.str("tahua.end_reason", s.end_reason.view());
  if (s.error.size) w.str("error.type", s.error.view());
  if (s.capture) {
    w.str("gen_ai.input.messages", r.text(s.input));
    w.str("gen_ai.output.messages", r.text(s.output));
  }
  char status[16] = "HTTP ";
  std::string_view message;
  if (s.error.size) message = s.error.view();
  else if (s.failed) message = std::string_view(status, static_cast<std::size_t>(std::to_chars(status + 5, status + sizeof status, s.status).ptr - status));
  w.endSpan(s.first_byte_ns ? "gen_ai.first_token" : "", s.first_byte_ns, s.failed, message);
}

void attemptSpan(const SpanRecordReader& r, const AttemptSpan& a, bool answered, SpanSink& w) {
  const ServerSpan& s = r.server();
  const std::string_view upstream_model = r.text(a.upstream_model);
  w.beginSpan({&s.trace_id, &a.span_id, &s.span_id, s.operation.view(), upstream_model, SpanKind::Client, a.start_ns, a.end_ns});
  w.str("gen_ai.operation.name", s.operation.view());
  if (a.has_provider) {
    w.str("gen_ai.provider.name", genAiProviderName(r.text(a.provider_type)));
    w.str("server.address", r.text(a.provider_host));
    w.integer("server.port", a.port);
    w.str("tahua.provider", r.text(a.provider_name));
  }
  if (a.has_deployment) {
    w.str("gen_ai.request.model", upstream_model);
    w.str("tahua.deployment", r.text(a.deployment_id));
    w.str("tahua.version", r.text(a.deployment_version));
  }
  if (a.status) w.integer("http.response.status_code", a.status);
  // The attempt that answered the client: the model its answer named, and its tokens
  // (earlier attempts failed before any answer; per attempt is what fallback billing reads).
  if (answered) {
    if (s.response_model.size) w.str("gen_ai.response.model", r.text(s.response_model));
    if (s.prompt_tokens >= 0) w.integer("gen_ai.usage.input_tokens", s.prompt_tokens);
    if (s.completion_tokens >= 0) w.integer("gen_ai.usage.output_tokens", s.completion_tokens);
  }
  if (a.error.size) w.str("error.type", a.error.view());
  const bool failed = a.error.size || a.status >= 500 || a.status == 429;
  w.endSpan(a.first_byte_ns ? "tahua.response_headers" : "", a.first_byte_ns, failed, a.error.size ? a.error.view() : "upstream failed");
}

}  // namespace

void describeSpans(const SpanRecordReader& r, SpanSink& sink) {
  serverSpan(r, sink);
  const std::size_t kept = r.server().kept;
  for (std::size_t i = 0; i < kept; ++i) attemptSpan(r, r.attempt(i), r.server().answered && i + 1 == kept, sink);
}

std::string_view genAiProviderName(std::string_view type) {
  if (type == "azure") return "azure.ai.openai";
  if (type == "gemini") return "gcp.gemini";
  if (type == "vertex") return "gcp.vertex_ai";
  if (type == "bedrock") return "aws.bedrock";
  return type;  // openai, anthropic, and the rest by their type name
}

}  // namespace tahua
