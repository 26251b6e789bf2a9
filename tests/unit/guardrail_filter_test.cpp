// The guardrail filter's bounds on a stream, through a real filter chain: the bytes it
// holds back waiting on a match that never completes, and the number of texts (choices,
// tool calls, blocks) it follows. Past either, the stream ends with an upstream error
// and nothing held is sent.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "filters/filter.h"
#include "filters/guardrails/chat_event_texts.h"
#include "filters/guardrails/guarded_texts.h"
#include "filters/guardrails/held_events.h"
#include "filters/guardrails/moderation_call.h"
#include "filters/guardrails/guardrail_filter.h"
#include "filters/usage/pending_records.h"
#include "filters/worker_services.h"
#include "guardrails/rule_set.h"
#include "telemetry/export_queue.h"
#include "telemetry/metrics.h"

namespace tahua {
namespace guardrail_filter_test {  // named, not anonymous: eight test files compile as one unit

class NoServices final : public WorkerServices {
 public:
  void post(std::function<void()> fn) override { fn(); }
  std::unique_ptr<TimerHandle> runAfter(Millis, std::function<void()>) override { return nullptr; }
  void fetch(OutboundRequest, std::function<void(OutboundResponse)> done) override { done(OutboundResponse{}); }
};

struct Stream {
  ConfigPtr config;
  WorkerMetrics metrics;
  NoServices services;
  ExportBuffer records{nullptr, 0};
  PendingRecords pending{records, services};
  FilterChain chain;
  std::vector<std::max_align_t> block;  // the chain's state block, aligned as it needs
  RequestContext ctx;
  std::string out;
  bool failed = false;
  Error error;

  Stream() {
    auto loaded = loadConfigString(
        "listeners: [{address: 127.0.0.1, port: 1}]\nproviders: [{name: m, type: mock}]\nmodels: [{name: m1, provider: m}]\n"
        "guardrails: {policies: [{name: p, rules: [{name: codes, patterns: ['\\bZX-\\d{4}\\b'], action: redact, inspect: [output]}]}]}\n",
        "t.yaml");
    config = loaded.config;
    chain.add(makeGuardrailFilter(metrics, services, pending));
    block.resize(chain.stateBytes() / sizeof(std::max_align_t) + 1);
    ctx.config = config;
    ctx.endpoint = Endpoint::ChatCompletions;
    ctx.body = "{\"model\":\"m1\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    ctx.model = config->findModel("m1");
    ctx.facts.model = "m1";
    chain.begin(ctx, reinterpret_cast<std::byte*>(block.data()));
    std::size_t next = 0;
    chain.run(RequestPhase::UpstreamSelect, ctx, next);
    ctx.status = 200;
    ctx.streaming = true;
    std::vector<std::pair<std::string_view, std::string_view>> headers;
    ctx.response_headers = &headers;
    chain.responseHeaders(ctx);
    ctx.response_headers = nullptr;
  }
  ~Stream() { chain.complete(ctx); }
  void piece(const std::string& bytes, bool last = false) {
    ResponseData data(bytes, last);
    chain.responseData(ctx, data);
    out.append(data.bytes());
    if (data.failed()) {
      failed = true;
      error = data.takeFailure();
    }
  }
};

std::string chunk(int index, const std::string& content) {
  return "data: {\"choices\":[{\"index\":" + std::to_string(index) + ",\"delta\":{\"content\":\"" + content + "\"}}]}\n\n";
}

TEST(GuardedTexts, McpArgumentsAndEveryKindOfAnswer) {
  namespace gt = guardrail_texts;
  auto strings = [](const std::vector<gt::Text>& texts) {
    std::vector<std::string> out;
    for (const auto& t : texts) out.emplace_back(std::string(*t.text) + "@" + std::to_string(t.target) + "/" + std::to_string(t.channel));
    return out;
  };
  boost::json::value call = boost::json::parse(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"q":"a","n":[{"s":"b"}],"k":3}}})");
  std::vector<gt::Text> texts;
  gt::requestTexts(Endpoint::Mcp, call, texts);
  EXPECT_EQ(strings(texts), (std::vector<std::string>{"a@4/0", "b@4/0"}));  // tool_arguments
  boost::json::value prompt = boost::json::parse(R"({"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"p","arguments":{"city":"c"}}})");
  texts.clear();
  gt::requestTexts(Endpoint::Mcp, prompt, texts);
  EXPECT_EQ(strings(texts), (std::vector<std::string>{"c@1/0"}));  // input
  boost::json::value answer = boost::json::parse(
      R"({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"t1"},{"type":"image","data":"AAAA"},)"
      R"({"type":"resource","resource":{"uri":"u","text":"r"}}],"structuredContent":{"v":"s"}}})");
  texts.clear();
  gt::answerTexts(Endpoint::Mcp, answer, texts);
  EXPECT_EQ(strings(texts), (std::vector<std::string>{"t1@8/0", "r@8/2048", "s@8/3072"}));  // output, a channel each
  gt::EventTexts event;
  gt::eventTexts(Endpoint::Mcp, answer, event);
  EXPECT_EQ(event.pieces.size(), 3u);
  EXPECT_EQ(event.closes, (std::vector<unsigned>{0, 2048, 3072}));  // the one event ends them all
  boost::json::value progress = boost::json::parse(R"({"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}})");
  gt::eventTexts(Endpoint::Mcp, progress, event);
  EXPECT_TRUE(event.pieces.empty());
  gt::blockAnswer(Endpoint::Mcp, answer);
  EXPECT_FALSE(answer.as_object().contains("result"));
  EXPECT_EQ(answer.at("error").at("code").as_int64(), -32000);
}

// The chat chunk reader without a DOM answers what eventTexts reads from the DOM, or
// declines (then the filter parses a DOM): duplicate keys (the last wins, as Boost.JSON
// keeps it), escaped keys, non-string contents, odd indexes, several choices.
TEST(GuardrailFilter, ChatEventsReadWithoutADomGiveTheDomsTexts) {
  namespace gt = guardrail_texts;
  const std::vector<std::string> events = {
      R"({"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]})",
      R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})",
      R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":1}})",
      R"({"choices":[{"index":1,"delta":{"content":"b"}},{"index":0,"delta":{"content":"a"},"finish_reason":"length"}]})",
      R"({"choices":[{"index":0,"delta":{"content":"first","content":"SECRET"}}]})",
      R"({"choices":[{"index":0,"delta":{"content":"x"},"delta":{"refusal":"no"}}]})",
      R"({"choices":[{"index":0,"delta":{"content":"old"}}],"choices":[{"index":2,"delta":{"content":"new"}}]})",
      R"({"choices":[{"index":0,"delta":{"content":"kept"}}],"choices":null})",
      R"({"cho\u0069ces":[{"ind\u0065x":3,"delta":{"c\u006fntent":"esc\"aped \u00e9 \ud83d\ude00 \n"}}]})",
      R"({"choices":[{"index":0,"delta":{"content":null}}]})",
      R"({"choices":[{"index":0,"delta":{"content":42}}]})",
      R"({"choices":[{"index":0,"delta":{"content":"s"},"delta":"not an object"}]})",
      R"({"choices":[{"index":1.0,"delta":{"content":"float index"}}]})",
      R"({"choices":[{"index":-1,"delta":{"content":"negative"}}]})",
      R"({"choices":[{"index":18446744073709551615,"delta":{"content":"big"}}]})",
      R"({"choices":[{"index":0,"finish_reason":"stop","finish_reason":null,"delta":{"content":"z"}}]})",
      R"({"choices":["not an object",7,null,{"index":4,"delta":{"content":"after"}}]})",
      R"({"choices":{"index":0}})",
      R"({"choices":[]})",
      R"({"object":"no choices"})",
      R"({"choices":[{"index":0,"delta":{"content":"deep"},"x":[[[[[[[[[[{"a":[1,2,{"b":null}]}]]]]]]]]]]}]})",
  };
  for (const std::string& text : events) {
    SCOPED_TRACE(text);
    boost::json::value doc = boost::json::parse(text);
    gt::EventTexts dom;
    gt::eventTexts(Endpoint::ChatCompletions, doc, dom);
    // Copied (a multi-line event), and in place with a stream's next event after it.
    std::string stream = text + "\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"next\"}}]}\n\n";
    stream.append(gt::kEventPadding, '"');
    for (const bool padded : {false, true}) {
      SCOPED_TRACE(padded ? "in place" : "copied");
      gt::ChatEventTexts fast;
      ASSERT_TRUE(gt::chatEventTexts(padded ? std::string_view(stream).substr(0, text.size()) : std::string_view(text), padded, fast));
      ASSERT_EQ(fast.pieces.size(), dom.pieces.size());
      for (std::size_t i = 0; i < dom.pieces.size(); ++i) {
        EXPECT_EQ(fast.pieces[i].channel, dom.pieces[i].channel);
        EXPECT_EQ(fast.pieces[i].text, std::string_view(*dom.pieces[i].text));
        EXPECT_EQ(dom.pieces[i].target, guardrails::kOutput);
      }
      EXPECT_EQ(fast.closes, dom.closes);
    }
  }
  // Declined: tool calls (the DOM reads them), and what is not one JSON object.
  gt::ChatEventTexts fast;
  for (const char* text : {R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]})",
                           R"({"choices":[{"index":0,"delta":{"content":"a"}}]} trailing)",
                           R"({"choices":[{"index":0,"delta":{"content":"a)", R"({"choices":[{"delta":{"content":"\x"}}]})"}) {
    SCOPED_TRACE(text);
    EXPECT_FALSE(gt::chatEventTexts(text, false, fast));
    // In place, with bytes after it that would complete a cut event: not read.
    std::string stream = std::string(text) + "\"}}]}\n\n";
    stream.append(gt::kEventPadding, ' ');
    EXPECT_FALSE(gt::chatEventTexts(std::string_view(stream).substr(0, std::string_view(text).size()), true, fast));
  }
}

// The held events' buffer: events found across reads (LF and CRLF), released in order,
// a run of them in one piece, a rewritten one in its place, the rest kept.
TEST(GuardrailFilter, HeldEventsAreFoundAcrossReadsAndReleasedInOrder) {
  namespace gs = guardrail_stream;
  gs::HeldEvents h;
  std::vector<std::string> seen;
  auto collect = [&](bool last) {
    h.events(last, [&](std::size_t b, std::size_t e) {
      gs::HeldEvent ev{b, e, {}, false};
      seen.emplace_back(h.raw(ev));
      h.hold(std::move(ev));
      return true;
    });
  };
  h.append("data: a\n\ndata: b\r\n\r");
  collect(false);
  ASSERT_EQ(seen, (std::vector<std::string>{"data: a\n\n"}));
  h.append("\ndata: c\n\ndata: d\n\ndata: tail");
  collect(false);
  ASSERT_EQ(seen, (std::vector<std::string>{"data: a\n\n", "data: b\r\n\r\n", "data: c\n\n", "data: d\n\n"}));
  EXPECT_EQ(h.heldBytes(), 9u + 11u + 9u + 9u);
  // a and b go as they came, c is rewritten, d waits.
  using R = gs::HeldEvents::Release;
  std::string out;
  int decided = 0;
  h.release(
      out, [&](const gs::HeldEvent&) { return ++decided == 3 ? R::Rewritten : decided == 4 ? R::Wait : R::AsItCame; },
      [&](gs::HeldEvent&, std::string& o) {
        o += "data: C\n\n";
        return true;
      });
  EXPECT_EQ(out, "data: a\n\ndata: b\r\n\r\ndata: C\n\n");
  EXPECT_EQ(h.heldBytes(), 9u);
  h.forgetReleased();
  // The incomplete tail is one more event at the stream's end; d is still held.
  collect(true);
  ASSERT_EQ(seen.back(), "data: tail");
  out.clear();
  h.release(out, [](const gs::HeldEvent&) { return R::AsItCame; }, [](gs::HeldEvent&, std::string&) { return true; });
  EXPECT_EQ(out, "data: d\n\ndata: tail");
  EXPECT_EQ(h.heldBytes(), 0u);
}

TEST(GuardrailFilter, AStreamHeldPastItsBoundEndsWithoutSendingWhatWasHeld) {
  Stream s;
  ASSERT_TRUE(s.config);
  s.piece(chunk(0, "ticket ZX-12"));  // a match that may still complete: held
  EXPECT_TRUE(s.out.empty());
  const std::string filler = chunk(1, std::string(1000, 'a'));
  for (int i = 0; i < 1100 && !s.failed; ++i) s.piece(filler);
  ASSERT_TRUE(s.failed) << "more than 1 MiB waited behind the open match";
  EXPECT_EQ(s.error.kind, ErrorKind::UpstreamBadResponse);
  EXPECT_NE(s.error.message.find("1 MiB"), std::string::npos);
  EXPECT_EQ(s.out.find("ZX-12"), std::string::npos) << "what was held is never sent";
}

TEST(GuardrailFilter, AStreamWithTooManyTextsEnds) {
  Stream s;
  for (int i = 0; i < 300 && !s.failed; ++i) s.piece(chunk(i, "x"));
  ASSERT_TRUE(s.failed);
  EXPECT_NE(s.error.message.find("more than 256"), std::string::npos);
}

TEST(GuardrailFilter, AMatchSplitOverEventsIsMaskedWhereItStarts) {
  Stream s;
  s.piece(chunk(0, "ticket ZX-1") + chunk(0, "2"));
  s.piece(chunk(0, "34 done"));
  s.piece("data: [DONE]\n\n", true);
  EXPECT_FALSE(s.failed);
  EXPECT_NE(s.out.find("\"content\":\"ticket [REDACTED]\""), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("\"content\":\"\""), std::string::npos) << "the match's rest removed from the next event: " << s.out;
  EXPECT_NE(s.out.find("\"content\":\" done\""), std::string::npos) << s.out;
  EXPECT_EQ(s.out.find("1234"), std::string::npos);
  EXPECT_NE(s.out.find("data: [DONE]\n\n"), std::string::npos);
}

// A moderation endpoint's answer is external input: only a 200 with one well-formed
// result per text sent is a verdict.
TEST(GuardrailModeration, AnAnswerOutOfShapeIsNoVerdict) {
  using guardrail_moderation::Verdict;
  guardrails::ModerationSpec mod;
  const auto reply = [](int status, std::string body) {
    OutboundResponse r;
    r.status = status;
    r.body = std::move(body);
    return r;
  };
  const auto verdict = [&](const OutboundResponse& r, std::size_t inputs = 1) { return guardrail_moderation::read(mod, r, inputs).verdict; };
  EXPECT_EQ(verdict(reply(200, R"({"results":[{"flagged":true}]})")), Verdict::Flagged);
  EXPECT_EQ(verdict(reply(200, R"({"results":[{"flagged":false},{"flagged":true}]})"), 2), Verdict::Flagged);
  EXPECT_EQ(verdict(reply(200, R"({"results":[{"flagged":false}]})")), Verdict::Clean);
  EXPECT_EQ(verdict(reply(200, R"({"results":[]})")), Verdict::None) << "a text without a result is unchecked";
  EXPECT_EQ(verdict(reply(200, R"({"results":[{"flagged":false}]})"), 2), Verdict::None);
  EXPECT_EQ(verdict(reply(200, R"({"results":[{"flagged":"no"}]})")), Verdict::None);
  EXPECT_EQ(verdict(reply(200, R"({"results":[7]})")), Verdict::None);
  EXPECT_EQ(verdict(reply(200, "not json")), Verdict::None);
  EXPECT_EQ(verdict(reply(500, R"({"results":[{"flagged":true}]})")), Verdict::None);
  OutboundResponse down;
  down.error = "connect: refused";
  EXPECT_EQ(guardrail_moderation::read(mod, down, 1).why, "connect: refused");
  mod.categories = {"hate"};
  mod.threshold = 0.5;
  EXPECT_EQ(verdict(reply(200, R"({"results":[{"flagged":true,"category_scores":{"hate":0.2}}]})")), Verdict::Clean) << "the listed categories decide";
  EXPECT_EQ(verdict(reply(200, R"({"results":[{"category_scores":{"hate":0.7}}]})")), Verdict::Flagged);
  EXPECT_EQ(verdict(reply(200, R"({"results":[{"category_scores":{"hate":"high"}}]})")), Verdict::None);
  EXPECT_EQ(verdict(reply(200, R"({"results":[{"flagged":true}]})")), Verdict::None) << "no scores to read";
}

// A filter that waits holds the stream; the chain resumes from it, the filters after it
// having seen the waited piece as not the last.
TEST(GuardrailModeration, TheChainResumesAStreamFromTheFilterThatWaited) {
  struct Probe final : Filter {
    bool wait_once = false;
    std::vector<std::string> seen;
    std::string_view name() const override { return "probe"; }
    bool wantsResponseData() const override { return true; }
    void onResponseData(RequestContext&, ResponseData& data) override {
      seen.push_back(std::string(data.bytes()) + (data.last() ? "|last" : "") + (data.resumed() ? "|resumed" : ""));
      if (wait_once && !data.resumed()) data.wait();
    }
  };
  FilterChain chain;
  auto first = std::make_unique<Probe>(), waiter = std::make_unique<Probe>(), after = std::make_unique<Probe>();
  Probe *a = first.get(), *w = waiter.get(), *z = after.get();
  w->wait_once = true;
  chain.add(std::move(first));
  chain.add(std::move(waiter));
  chain.add(std::move(after));
  RequestContext ctx;
  ResponseData data("end", true);
  const std::size_t from = chain.responseData(ctx, data);
  EXPECT_EQ(from, 1u);
  EXPECT_TRUE(data.waiting());
  ResponseData more = ResponseData::resumedAfter(data);
  EXPECT_EQ(chain.responseData(ctx, more, from), static_cast<std::size_t>(-1));
  EXPECT_EQ(a->seen, (std::vector<std::string>{"end|last"}));
  EXPECT_EQ(w->seen, (std::vector<std::string>{"end|last", "|last|resumed"}));
  EXPECT_EQ(z->seen, (std::vector<std::string>{"end", "|last|resumed"}));
}

}  // namespace guardrail_filter_test
}  // namespace tahua
