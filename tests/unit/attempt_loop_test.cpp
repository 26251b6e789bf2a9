// The proxy attempt loop without sockets: scripted upstream exchanges behind a fake
// adapter, a fake client host that records what the client would get, and a tiny
// selection filter. Pins retry / failover / fallback-answer order and "never a retry
// after the first byte".
#include "server/attempt_loop.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <deque>
#include <string>
#include <vector>

#include "providers/translation.h"
#include "server/upstream_client.h"
#include "telemetry/metrics.h"

namespace tahua {
namespace attempt_loop_test {  // named, not anonymous: eight test files compile as one unit

namespace asio = boost::asio;

// What one upstream attempt does.
struct Script {
  std::optional<Error> failure;  // start() fails with it
  int status = 200;
  std::string body = R"({"id":"x","object":"chat.completion","choices":[]})";
};

struct Upstream {
  std::deque<Script> scripts;
  std::vector<std::string> opened;  // "model/deployment" per attempt
};

class FakeExchange final : public UpstreamExchange {
 public:
  explicit FakeExchange(Script s) : s_(std::move(s)) {}
  asio::awaitable<std::optional<Error>> start(ResponseHead& head) override {
    if (s_.failure) co_return s_.failure;
    head.status = s_.status;
    head.content_type = "application/json";
    co_return std::nullopt;
  }
  asio::awaitable<std::optional<Error>> read(std::string_view& bytes, bool& done) override {
    bytes = s_.body;
    done = true;
    co_return std::nullopt;
  }
  void abort() noexcept override { aborted = true; }
  bool aborted = false;

 private:
  Script s_;
};

class FakeAdapter final : public ProviderAdapter {
 public:
  explicit FakeAdapter(Upstream& up) : up_(up) {}
  std::string_view type() const override { return "fake"; }
  std::variant<UpstreamRequest, Error> encodeRequest(RequestContext& ctx, const ProviderRuntime&) const override {
    UpstreamRequest r;
    r.path = "/v1/chat/completions";
    r.body = std::move(ctx.body);
    return r;
  }
  std::unique_ptr<ResponseTranslator> responseTranslator(const RequestContext&, const UpstreamRequest&,
                                                         const ProviderRuntime& p) const override {
    return makePassThroughTranslator(WireFormat::OpenAIChat, false, p.config);
  }
  std::unique_ptr<UpstreamExchange> openExchange(UpstreamRequest, RequestContext& ctx, const ProviderRuntime&,
                                                 UpstreamEnv&) const override {
    up_.opened.push_back(ctx.model->name + "/" + ctx.deployment->id);
    Script s = up_.scripts.empty() ? Script{} : up_.scripts.front();
    if (!up_.scripts.empty()) up_.scripts.pop_front();
    return std::make_unique<FakeExchange>(std::move(s));
  }

 private:
  Upstream& up_;
};

// Router + balancer in miniature: the model by name, then the first deployment not tried.
class SelectFilter final : public Filter {
 public:
  explicit SelectFilter(int& completes) : completes_(completes) {}
  std::string_view name() const override { return "select"; }
  FilterStatus onUpstreamSelect(RequestContext& ctx) override {
    ctx.model = ctx.config->findModel(ctx.facts.model);
    return pick(ctx);
  }
  FilterStatus onReselect(RequestContext& ctx) override { return pick(ctx); }
  void onAttemptFailed(RequestContext& ctx) override { ctx.tried.push_back(ctx.deployment->index); }
  void onComplete(RequestContext&) override { ++completes_; }

 private:
  FilterStatus pick(RequestContext& ctx) {
    const DeploymentConfig* chosen = &ctx.model->deployments.front();
    for (const auto& d : ctx.model->deployments)
      if (std::find(ctx.tried.begin(), ctx.tried.end(), d.index) == ctx.tried.end()) {
        chosen = &d;
        break;
      }
    ctx.deployment = chosen;
    ctx.provider = &ctx.config->providers[chosen->provider_index];
    return FilterStatus::Continue;
  }
  int& completes_;
};

// The client side: records what it was asked to write.
class FakeHost final : public AttemptHost {
 public:
  bool clientGone() const override { return gone; }
  void watchClient(UpstreamExchange* exchange) override { watched = exchange; }
  void stopWatching() override { watched = nullptr; }
  asio::awaitable<bool> sleepFor(Millis wait) override {
    sleeps.push_back(wait);
    co_return true;
  }
  asio::awaitable<FilterStatus> finishPausedPhase(RequestPhase, RequestContext&, std::size_t) override {
    ADD_FAILURE() << "no filter pauses here";
    co_return FilterStatus::Stop;
  }
  asio::awaitable<void> answerLocally(RequestContext& ctx) override {
    answers.push_back("local " + std::string(ctx.error ? ctx.error->code() : "reply"));
    co_return;
  }
  asio::awaitable<void> answerFallback(RequestContext&, int status, std::string_view, std::string_view body,
                                       std::string_view reason) override {
    answers.push_back("fallback " + std::to_string(status) + " " + std::string(reason));
    fallback_body = body;
    co_return;
  }
  asio::awaitable<std::optional<Error>> readAnswer(RequestContext& ctx, UpstreamExchange& exchange, ResponseTranslator&,
                                                   ResponseHead& head, std::string& body) override {
    ctx.status = head.status;
    std::string_view bytes;
    bool done = false;
    auto err = co_await exchange.read(bytes, done);
    body.assign(bytes);
    co_return err;
  }
  asio::awaitable<void> relayAnswer(RequestContext& ctx, ResponseHead& head, std::string& body) override {
    answers.push_back("relay judged " + std::to_string(head.status) + " " + body);
    ctx.status = head.status;
    co_return;
  }
  asio::awaitable<void> relay(RequestContext& ctx, UpstreamExchange&, ResponseTranslator&, ResponseHead& head,
                              std::optional<Error>& failure) override {
    answers.push_back(failure ? "relay " + std::string(failure->code()) : "relay " + std::to_string(head.status));
    ctx.status = failure ? failure->httpStatus() : head.status;
    // The first byte is out; the stream then breaks: the loop must not try again.
    if (break_stream) ctx.fail(Error{ErrorKind::UpstreamInterrupted, "reset mid-stream"});
    co_return;
  }

  bool gone = false;
  bool break_stream = false;
  UpstreamExchange* watched = nullptr;
  std::vector<Millis> sleeps;
  std::vector<std::string> answers;
  std::string fallback_body;
};

const char* kConfig = R"(
listeners: [{port: 0}]
providers:
  - {name: p1, type: openai, base_url: "http://127.0.0.1:9/v1", retry: {attempts: 2, on_status: [503], backoff: 0ms}}
  - {name: p2, type: openai, base_url: "http://127.0.0.1:9/v1", retry: {attempts: 2, on_status: [503], backoff: 0ms}}
models:
  - name: chat
    deployments: [{id: a, provider: p1}, {id: b, provider: p2}]
    fallbacks: [small]
    fallback_response: {message: "busy", status: 503}
  - name: small
    provider: p1
)";

struct Fixture {
  Fixture() {
    auto loaded = loadConfigString(kConfig, "t.yaml");
    EXPECT_TRUE(loaded.config) << loaded.error;
    config = loaded.config;
    auto snap = std::make_shared<Snapshot>();
    snap->config = config;
    for (const auto& p : config->providers) {
      ProviderRuntime rt;
      rt.config = &p;
      rt.adapter = std::make_unique<FakeAdapter>(upstream);
      snap->providers.push_back(std::move(rt));
    }
    snapshot = snap;
    chain.add(std::make_unique<SelectFilter>(completes));
  }

  RequestContext run(std::string model = "chat") {
    RequestContext ctx;
    ctx.config = config;
    ctx.endpoint = Endpoint::ChatCompletions;
    ctx.facts.model = std::move(model);
    ctx.body = R"({"model":"chat","messages":[]})";
    chain.begin(ctx, nullptr);
    AttemptEnv env{*snapshot, chain, upstream_env, metrics};
    asio::co_spawn(io, runAttempts(ctx, env, host), asio::detached);
    io.run();
    io.restart();
    return ctx;
  }

  ConfigPtr config;
  SnapshotPtr snapshot;
  Upstream upstream;
  FilterChain chain;
  int completes = 0;
  asio::io_context io;
  UpstreamPool pool;
  WorkerMetrics metrics;
  UpstreamEnv upstream_env{io, pool, metrics};
  FakeHost host;
};

Error connectError() { return Error{ErrorKind::UpstreamConnect, "refused"}; }

TEST(AttemptLoop, RetriesOnAnotherDeploymentWhileNothingReachedTheClient) {
  Fixture f;
  f.upstream.scripts = {Script{connectError()}, Script{}};
  RequestContext ctx = f.run();
  EXPECT_EQ(f.upstream.opened, (std::vector<std::string>{"chat/a", "chat/b"}));
  EXPECT_EQ(f.host.answers, (std::vector<std::string>{"relay 200"}));
  EXPECT_EQ(ctx.attempts, 2);
  EXPECT_EQ(f.host.sleeps.size(), 1u);
  EXPECT_EQ(f.completes, 1);
  EXPECT_EQ(f.metrics.upstream_retries["p1"], 1u);
}

TEST(AttemptLoop, NeverTriesAgainOnceTheRelayBegan) {
  Fixture f;
  // The answer starts fine; the stream then breaks (the host's relay reports it): the
  // retry budget (2) and the fallbacks are not touched.
  f.upstream.scripts = {Script{}, Script{}};
  f.host.break_stream = true;
  RequestContext ctx = f.run();
  EXPECT_EQ(f.upstream.opened.size(), 1u);
  EXPECT_EQ(f.host.answers, (std::vector<std::string>{"relay 200"}));
  EXPECT_EQ(ctx.attempts, 1);
  EXPECT_EQ(f.completes, 1);
}

TEST(AttemptLoop, FailsOverToFallbackModelsThenTheFallbackAnswer) {
  Fixture f;
  Script busy;
  busy.status = 503;
  f.upstream.scripts = {busy, busy, busy, busy};
  RequestContext ctx = f.run();
  // chat: a, then b (retry on another deployment); small: its one deployment, twice.
  EXPECT_EQ(f.upstream.opened, (std::vector<std::string>{"chat/a", "chat/b", "small/p1", "small/p1"}));
  EXPECT_EQ(f.host.answers, (std::vector<std::string>{"fallback 503 upstream_status_503"}));
  EXPECT_NE(f.host.fallback_body.find("\"is_fallback\":true"), std::string::npos);
  EXPECT_EQ(ctx.fallback, "response");
  EXPECT_EQ(ctx.attempts, 4);
  EXPECT_EQ(f.completes, 1);
}

TEST(AttemptLoop, AClientErrorIsRelayedNeverRetriedOrFailedOver) {
  Fixture f;
  Script bad;
  bad.status = 400;
  f.upstream.scripts = {bad};
  RequestContext ctx = f.run();
  EXPECT_EQ(f.upstream.opened.size(), 1u);
  EXPECT_EQ(f.host.answers, (std::vector<std::string>{"relay 400"}));
  EXPECT_EQ(ctx.attempts, 1);
}

// Judges whole answers: refuses those that say "bad" (the quality check's shape).
class JudgeFilter final : public Filter {
 public:
  std::string_view name() const override { return "judge"; }
  bool judgesAnswers() const override { return true; }
  bool judgesAnswer(const RequestContext&) const override { return true; }
  FilterStatus onAnswer(RequestContext& ctx) override {
    seen.push_back(*ctx.answer);
    if (ctx.answer->find("bad") == std::string::npos) return FilterStatus::Continue;
    ctx.fail(Error{ErrorKind::ResponseQualityLow, "off-topic"});
    return FilterStatus::Stop;
  }
  void onAttemptFailed(RequestContext& ctx) override {
    failed.push_back(ctx.model->name + (ctx.error ? " " + std::string(ctx.error->code()) : ""));
  }
  std::vector<std::string> seen, failed;
};

Script answering(std::string text) {
  Script s;
  s.body = R"({"choices":[{"message":{"content":")" + text + R"("}}]})";
  return s;
}

TEST(AttemptLoop, AJudgedAnswerIsReadWholeAndSentWhenAccepted) {
  Fixture f;
  auto judge = std::make_unique<JudgeFilter>();
  JudgeFilter& j = *judge;
  f.chain.add(std::move(judge));
  f.upstream.scripts = {answering("good")};
  RequestContext ctx = f.run();
  ASSERT_EQ(j.seen.size(), 1u);
  ASSERT_EQ(f.host.answers.size(), 1u);
  EXPECT_EQ(f.host.answers[0].rfind("relay judged 200 ", 0), 0u) << f.host.answers[0];
  EXPECT_EQ(ctx.attempts, 1);
  EXPECT_TRUE(j.failed.empty());
}

TEST(AttemptLoop, ARefusedAnswerGoesToTheNextFallbackModelOnce) {
  Fixture f;
  auto judge = std::make_unique<JudgeFilter>();
  JudgeFilter& j = *judge;
  f.chain.add(std::move(judge));
  f.upstream.scripts = {answering("bad"), answering("good")};
  RequestContext ctx = f.run();
  EXPECT_EQ(f.upstream.opened, (std::vector<std::string>{"chat/a", "small/p1"}));
  EXPECT_EQ(j.failed, (std::vector<std::string>{"chat response_quality_low"}));
  ASSERT_EQ(f.host.answers.size(), 1u);
  EXPECT_NE(f.host.answers[0].find("good"), std::string::npos) << f.host.answers[0];
  EXPECT_FALSE(ctx.error);  // the refusal is cleared by the fallback's selection
  EXPECT_EQ(ctx.fallback, "model");
  EXPECT_EQ(f.completes, 1);
}

TEST(AttemptLoop, ASecondRefusedAnswerIsAnsweredWithTheRefusal) {
  Fixture f;
  auto judge = std::make_unique<JudgeFilter>();
  f.chain.add(std::move(judge));
  f.upstream.scripts = {answering("bad"), answering("bad again")};
  RequestContext ctx = f.run();
  EXPECT_EQ(f.upstream.opened.size(), 2u);
  EXPECT_EQ(f.host.answers, (std::vector<std::string>{"local response_quality_low"}));
  EXPECT_EQ(f.completes, 1);
}

TEST(AttemptLoop, ARefusedAnswerWithoutAFallbackModelIsAnsweredWithTheRefusal) {
  Fixture f;
  auto judge = std::make_unique<JudgeFilter>();
  f.chain.add(std::move(judge));
  f.upstream.scripts = {answering("bad")};
  RequestContext ctx = f.run("small");
  EXPECT_EQ(f.upstream.opened.size(), 1u);
  EXPECT_EQ(f.host.answers, (std::vector<std::string>{"local response_quality_low"}));
}

TEST(AttemptLoop, AClientGoneBeforeTheAnswerGetsNothingAndCounts499) {
  Fixture f;
  f.upstream.scripts = {Script{connectError()}};
  f.host.gone = true;
  RequestContext ctx = f.run();
  EXPECT_EQ(f.upstream.opened.size(), 1u);  // no retry for a client that left
  EXPECT_EQ(ctx.status, 499);
  EXPECT_EQ(f.completes, 1);
}

}  // namespace attempt_loop_test
}  // namespace tahua
