// The built-in `mock` provider: answers in-process, deterministically, in OpenAI's
// wire format, with a configurable number of tokens and delay between stream chunks.
// It makes the default config work offline and gives load tests an upstream that
// costs almost nothing.
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/as_tuple.hpp>
#include <chrono>

#include "providers/mock/mock_responses.h"
#include "providers/translation.h"

namespace tahua {
namespace {

namespace asio = boost::asio;

class MockExchange final : public UpstreamExchange {
 public:
  MockExchange(mock::MockRequest request, Millis delay) : request_(std::move(request)), delay_(delay) {}

  asio::awaitable<std::optional<Error>> start(ResponseHead& head) override {
    head.status = 200;
    head.event_stream = request_.stream && request_.endpoint != Endpoint::Embeddings;
    head.content_type = head.event_stream ? "text/event-stream; charset=utf-8" : "application/json";
    head.headers.emplace_back("x-tahua-mock", "1");
    co_return std::nullopt;
  }

  asio::awaitable<std::optional<Error>> read(std::string_view& bytes, bool& done) override {
    if (aborted_) co_return Error{ErrorKind::UpstreamInterrupted, "The upstream stream was interrupted."};
    if (!request_.stream || request_.endpoint == Endpoint::Embeddings) {
      current_ = mock::fullResponse(request_);
      bytes = current_;
      done = true;
      co_return std::nullopt;
    }
    if (delay_.count() > 0) {
      if (!timer_) timer_.emplace(co_await asio::this_coro::executor);
      timer_->expires_after(delay_);
      auto [ec] = co_await timer_->async_wait(asio::as_tuple(asio::use_awaitable));
      if (ec || aborted_) co_return Error{ErrorKind::UpstreamInterrupted, "The upstream stream was interrupted."};
    }
    current_ = mock::streamEvent(request_, next_);
    ++next_;
    bytes = current_;
    done = next_ >= mock::eventCount(request_);
    co_return std::nullopt;
  }

  void abort() noexcept override {
    aborted_ = true;
    if (timer_) timer_->cancel();
  }

 private:
  mock::MockRequest request_;
  Millis delay_;
  std::optional<asio::steady_timer> timer_;
  std::string current_;
  int next_ = 0;
  bool aborted_ = false;
};

// OpenAI endpoints pass through to the in-process answers; /v1/messages and
// /v1/responses are translated to chat completions first, exactly as for a real
// OpenAI-format upstream, so the default config serves every inbound API.
class MockAdapter final : public TranslatingAdapter {
 public:
  MockAdapter() : TranslatingAdapter(makeOpenAIChatCodec()) {}
  std::string_view type() const override { return "mock"; }

  std::variant<UpstreamRequest, Error> encodeRequest(RequestContext& ctx, const ProviderRuntime& provider) const override {
    if (!native(ctx, *provider.config)) return translate(ctx, provider);
    UpstreamRequest req;
    req.path = std::string(endpointPath(ctx.endpoint));
    if (ctx.endpoint == Endpoint::ChatCompletions || ctx.endpoint == Endpoint::Completions)
      req.hide_stream_usage = ctx.facts.stream && !ctx.facts.include_usage && provider.config->stream_usage;
    req.body = std::move(ctx.body);
    return req;
  }

  std::unique_ptr<UpstreamExchange> openExchange(UpstreamRequest request, RequestContext& ctx,
                                                 const ProviderRuntime& provider, UpstreamEnv&) const override {
    const MockProviderConfig& cfg = provider.config->mock;
    mock::MockRequest r;
    // A translated request arrives as a chat completion.
    r.endpoint = native(ctx, *provider.config) ? ctx.endpoint : Endpoint::ChatCompletions;
    r.model = ctx.deployment ? ctx.deployment->upstream_model : ctx.facts.model;
    r.stream = ctx.facts.stream;
    // Like a real upstream asked for stream usage (stream_options.include_usage).
    r.include_usage = ctx.facts.include_usage || request.hide_stream_usage || !native(ctx, *provider.config);
    r.completion_tokens = cfg.completion_tokens;
    r.prompt_tokens = mock::estimatePromptTokens(request.body);
    r.embedding_dimensions = cfg.embedding_dimensions;
    if (ctx.endpoint == Endpoint::Embeddings) {
      r.embedding_inputs = mock::countEmbeddingInputs(request.body);
      r.embedding_base64 = mock::wantsBase64(request.body);
    }
    r.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    return std::make_unique<MockExchange>(std::move(r), cfg.chunk_delay);
  }

 protected:
  // Chat, completions and embeddings have an in-process answer; moderations, images,
  // rerank and audio have none: translate() refuses them with a 400 naming the provider
  // type, as for any provider without them.
  bool native(const RequestContext& ctx, const ProviderConfig&) const override {
    return ctx.endpoint == Endpoint::ChatCompletions || ctx.endpoint == Endpoint::Completions ||
           ctx.endpoint == Endpoint::Embeddings || ctx.endpoint == Endpoint::Models;
  }

  std::unique_ptr<ResponseTranslator> passThroughTranslator(const RequestContext& ctx, const UpstreamRequest& request, const ProviderConfig& provider) const override {
    return makePassThroughTranslator(WireFormat::OpenAIChat, request.hide_stream_usage, &provider);
  }

  std::optional<Error> authorize(UpstreamRequest&, const ProviderRuntime&) const override { return std::nullopt; }
};

}  // namespace

std::unique_ptr<ProviderAdapter> makeMockAdapter() { return std::make_unique<MockAdapter>(); }

}  // namespace tahua
