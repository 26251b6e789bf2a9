// The guardrail filter on a streamed answer (src/filters/guardrails/): an upstream's
// (translated) event stream, cut into reads anywhere, through onResponseData with a
// policy that redacts payment cards and emails, flags a literal and blocks another.
//
// Input: a control byte (the client API: chat, completions, Responses, Anthropic), two
// 16-bit split choices, then the stream body.
// Checked beyond "no crash":
// - what the client gets is the same whatever the reads (the stream whole in one piece,
//   and cut at the two fuzzer-chosen points), and so is whether a block ended it;
// - a stream no rule matched passes through byte for byte (unless it could not be read:
//   an event that is not JSON, or whose data is not an object, ends it without a verdict).
#include <cstdint>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "filters/filter.h"
#include "filters/guardrails/guardrail_filter.h"
#include "filters/usage/pending_records.h"
#include "filters/worker_services.h"
#include "telemetry/export_queue.h"
#include "fuzz_input.h"
#include "guardrails/rule_set.h"
#include "telemetry/metrics.h"

namespace {

using namespace tahua;

class NoServices final : public WorkerServices {
 public:
  void post(std::function<void()> fn) override { fn(); }
  std::unique_ptr<TimerHandle> runAfter(Millis, std::function<void()>) override { return nullptr; }
  void fetch(OutboundRequest, std::function<void(OutboundResponse)> done) override { done(OutboundResponse{}); }
};

// Built in code rather than loaded: the target needs the guardrails, not the loader.
const ConfigPtr& config() {
  static const ConfigPtr c = [] {
    auto cfg = std::make_shared<Config>();
    cfg->models.emplace_back().name = "m1";
    cfg->model_index.emplace("m1", 0);
    std::vector<guardrails::RuleSpec> rules(3);
    rules[0].name = "pii";
    rules[0].detector = guardrails::RuleSpec::Detector::Pii;
    rules[0].pii = {guardrails::PiiKind::PaymentCard, guardrails::PiiKind::Email};
    rules[0].action = guardrails::Action::Redact;
    rules[0].targets = guardrails::kOutput | guardrails::kOutputToolCalls;
    rules[1].name = "flag";
    rules[1].literals = {"tahua"};
    rules[1].caseless = true;
    rules[1].action = guardrails::Action::Flag;
    rules[1].targets = guardrails::kOutput;
    rules[2].name = "stop";
    rules[2].patterns = {"\\bforbid\\w{0,4}\\b"};
    rules[2].action = guardrails::Action::Block;
    rules[2].targets = guardrails::kOutput;
    GuardrailPolicyConfig& pol = cfg->guardrails.policies.emplace_back();
    pol.name = "p";
    std::string error;
    pol.rules = guardrails::RuleSet::compile(std::move(rules), error);
    if (!pol.rules) std::abort();
    return ConfigPtr(std::move(cfg));
  }();
  return c;
}

struct Outcome {
  std::string out;
  bool failed = false;
  std::uint64_t verdicts = 0;
};

Outcome run(Endpoint endpoint, const std::vector<std::string_view>& pieces) {
  WorkerMetrics metrics;
  NoServices services;
  ExportBuffer records{nullptr, '\n'};
  PendingRecords pending{records, services};
  FilterChain chain;
  chain.add(makeGuardrailFilter(metrics, services, pending));
  std::vector<std::max_align_t> block(chain.stateBytes() / sizeof(std::max_align_t) + 1);  // aligned as the chain needs
  RequestContext ctx;
  ctx.config = config();
  ctx.endpoint = endpoint;
  ctx.body = "{\"model\":\"m1\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
  ctx.model = ctx.config->findModel("m1");
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
  Outcome o;
  for (std::size_t i = 0; i < pieces.size() && !o.failed; ++i) {
    const std::string copy(pieces[i]);  // freed after the piece: a view kept into it is caught
    ResponseData data(copy, i + 1 == pieces.size());
    chain.responseData(ctx, data);
    o.out.append(data.bytes());
    o.failed = data.failed();
  }
  chain.complete(ctx);
  for (const auto& [key, n] : metrics.guardrail_actions) o.verdicts += n;
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tahua::fuzz::Input in(data, size);
  static constexpr Endpoint kEndpoints[] = {Endpoint::ChatCompletions, Endpoint::Completions, Endpoint::Responses, Endpoint::Messages};
  const Endpoint endpoint = kEndpoints[in.byte() % 4];
  const std::uint16_t a = in.u16(), b = in.u16();
  const std::string_view body = in.rest();
  std::size_t x = tahua::fuzz::splitPoint(a, body.size()), y = tahua::fuzz::splitPoint(b, body.size());
  if (x > y) std::swap(x, y);
  const Outcome whole = run(endpoint, {body});
  const Outcome cut = run(endpoint, {body.substr(0, x), body.substr(x, y - x), body.substr(y)});
  FUZZ_CHECK(whole.failed == cut.failed);
  // A block drops what is held: in one piece nothing was sent before it; in several,
  // events released by earlier reads were.
  if (!whole.failed) FUZZ_CHECK(whole.out == cut.out);
  // (A stream the rules cannot read, an event not JSON or not an object, fails without a verdict.)
  if (whole.verdicts == 0 && !whole.failed) FUZZ_CHECK(whole.out == body);
  return 0;
}
