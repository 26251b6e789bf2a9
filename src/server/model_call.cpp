#include "server/model_call.h"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cctype>
#include <memory>

#include "http/request_inspect.h"

namespace tahua {

namespace asio = boost::asio;

namespace {

OutboundResponse failed(std::string why) {
  OutboundResponse r;
  r.error = std::move(why);
  return r;
}

}  // namespace

// Note for GCC 12: no temporary with a destructor as an argument inside a co_await
// expression (see attempt_loop.cpp).
asio::awaitable<OutboundResponse> callModel(SnapshotPtr snapshot, UpstreamEnv& env, WorkerServices::ModelCall call) {
  const Config& cfg = *snapshot->config;
  const ModelConfig* m = call.model.starts_with("mcp:") ? cfg.mcp.targetOf(std::string_view(call.model).substr(4)) : cfg.findModel(call.model);
  if (!m || m->deployments.empty()) co_return failed("unknown model \"" + call.model + "\"");
  RequestContext ctx;
  ctx.config = snapshot->config;
  ctx.endpoint = call.endpoint;
  ctx.method = call.method;
  ctx.request_id = "tahua-internal";
  ctx.body = std::move(call.body);
  if (!mcpEndpoint(call.endpoint)) {  // an MCP message names no model
    auto inspected = inspectRequest(ctx.body, cfg.server.max_json_depth);
    if (auto* err = std::get_if<Error>(&inspected)) co_return failed(err->message);
    ctx.facts = std::move(std::get<RequestFacts>(inspected));
  }
  ctx.model = m;
  ctx.requested_model = m;
  ctx.deployment = &m->deployments.front();
  const ProviderRuntime& provider = snapshot->providers[ctx.deployment->provider_index];
  ctx.provider = provider.config;
  auto encoded = provider.adapter->encodeRequest(ctx, provider);
  if (auto* err = std::get_if<Error>(&encoded)) co_return failed(err->message);
  UpstreamRequest& request = std::get<UpstreamRequest>(encoded);
  for (const auto& [name, value] : call.headers) request.addHeader(name, value);
  std::unique_ptr<UpstreamExchange> exchange = provider.adapter->openExchange(std::move(request), ctx, provider, env);
  // The caller's deadline over the whole call (the provider's own timeouts apply too).
  bool timed_out = false;
  asio::steady_timer deadline(env.io, call.timeout);
  deadline.async_wait([&timed_out, ex = exchange.get()](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled: the call ended first
    timed_out = true;
    ex->abort();
  });
  OutboundResponse out;
  ResponseHead head;
  std::optional<Error> err = co_await exchange->start(head);
  if (!err) {
    out.status = head.status;
    if (!head.content_type.empty()) out.headers.emplace_back("content-type", std::string(head.content_type));
    for (const auto& [name, value] : head.headers) {
      std::string lower(name);
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      out.headers.emplace_back(std::move(lower), std::string(value));
    }
    for (;;) {
      std::string_view bytes;
      bool done = false;
      err = co_await exchange->read(bytes, done);
      if (err) break;
      if (out.body.size() + bytes.size() > call.max_response_bytes) {
        exchange->abort();
        err = Error{ErrorKind::UpstreamBadResponse, "response too large"};
        break;
      }
      out.body.append(bytes);
      if (done) break;
    }
  }
  deadline.cancel();
  if (err) {
    out.status = 0;
    out.body.clear();
    out.error = timed_out ? "timeout" : err->message;
  }
  co_return out;
}

}  // namespace tahua
