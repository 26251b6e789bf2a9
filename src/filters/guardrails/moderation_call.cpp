#include "filters/guardrails/moderation_call.h"

#include <boost/json.hpp>

#include "core/json_read.h"

namespace tahua::guardrail_moderation {

namespace json = boost::json;

std::optional<OutboundRequest> request(const guardrails::ModerationSpec& mod, const std::vector<std::string_view>& texts) {
  std::string why;
  auto url = parseHttpUrl(mod.url, &why, true);
  if (!url) return std::nullopt;
  OutboundRequest call;
  call.method = "POST";
  call.url = std::move(*url);
  call.headers.emplace_back("content-type", "application/json");
  if (!mod.api_key.empty()) call.headers.emplace_back("authorization", "Bearer " + mod.api_key);
  json::array input;
  for (std::string_view t : texts) input.emplace_back(t);
  json::object body{{"input", std::move(input)}};
  if (!mod.model.empty()) body["model"] = mod.model;
  call.body = json::serialize(body);
  call.timeout = Millis(mod.timeout_ms);
  call.max_response_bytes = 1 << 20;
  return call;
}

Reading read(const guardrails::ModerationSpec& mod, const OutboundResponse& res, std::size_t inputs) {
  Reading r;
  if (res.status != 200) {
    r.why = res.status == 0 ? res.error : "status " + std::to_string(res.status);
    return r;
  }
  json::error_code ec;
  const json::value doc = readJson(res.body, ec);
  const json::value* results = !ec && doc.is_object() ? doc.as_object().if_contains("results") : nullptr;
  if (!results || !results->is_array()) {
    r.why = "no results array in the answer";
    return r;
  }
  // One result per text: fewer would leave texts unchecked.
  if (results->as_array().size() != inputs) {
    r.why = std::to_string(results->as_array().size()) + " results for " + std::to_string(inputs) + " texts";
    return r;
  }
  bool flagged = false;
  for (const json::value& result : results->as_array()) {
    const json::object* o = result.if_object();
    if (!o) {
      r.why = "a result is not an object";
      return r;
    }
    if (mod.categories.empty()) {
      const json::value* f = o->if_contains("flagged");
      if (!f || !f->is_bool()) {
        r.why = "a result without a boolean `flagged`";
        return r;
      }
      flagged = flagged || f->as_bool();
      continue;
    }
    const json::value* scores = o->if_contains("category_scores");
    if (!scores || !scores->is_object()) {
      r.why = "a result without `category_scores`";
      return r;
    }
    for (const std::string& c : mod.categories) {
      const json::value* sc = scores->as_object().if_contains(c);
      if (!sc) continue;  // a category the endpoint does not score
      if (!sc->is_number()) {
        r.why = "a category score that is not a number";
        return r;
      }
      if (sc->to_number<double>() >= mod.threshold) flagged = true;
    }
  }
  r.verdict = flagged ? Verdict::Flagged : Verdict::Clean;
  return r;
}

}  // namespace tahua::guardrail_moderation
