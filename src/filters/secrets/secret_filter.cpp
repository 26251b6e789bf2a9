#include "filters/secrets/secret_filter.h"

#include <optional>
#include <string>
#include <vector>

#include "providers/secret_scrubber.h"

namespace tahua {
namespace {

struct SecretState {
  std::optional<SecretScrubber> scrubber;  // for the provider that answered
  std::vector<std::string> headers;        // header values that held a secret (rare)
};

class SecretFilter final : public FilterWithState<SecretState> {
 public:
  std::string_view name() const override { return "secrets"; }
  bool wantsResponseData() const override { return true; }

  void onResponseHeaders(RequestContext& ctx) override {
    SecretState& st = state(ctx);
    if (!ctx.provider) return;
    st.scrubber.emplace(*ctx.provider);
    if (!st.scrubber->active() || !ctx.response_headers) return;
    st.headers.clear();
    st.headers.reserve(ctx.response_headers->size());  // the views below must not move
    for (auto& [name, value] : *ctx.response_headers) {
      std::string clean;
      if (!st.scrubber->scrubValue(value, clean)) continue;
      st.headers.push_back(std::move(clean));
      value = st.headers.back();
    }
  }

  void onResponseData(RequestContext& ctx, ResponseData& data) override {
    SecretState& st = state(ctx);
    if (!st.scrubber || !st.scrubber->active()) return;
    if (data.aborted()) {
      st.scrubber->dropHeld();  // the start of a secret is never sent
      return;
    }
    data.replace(st.scrubber->scrubPiece(data.bytes()));
    if (data.last()) st.scrubber->dropHeld();
  }

  void onResponseBody(RequestContext& ctx, std::string& body) override {
    SecretState& st = state(ctx);
    if (st.scrubber) st.scrubber->scrubWhole(body);
  }
};

}  // namespace

std::unique_ptr<Filter> makeSecretFilter() { return std::make_unique<SecretFilter>(); }

}  // namespace tahua
