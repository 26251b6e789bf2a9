#include "kubernetes/deployment_scale.h"

#include <algorithm>
#include <boost/json.hpp>

#include "core/json_read.h"
#include "kubernetes/kube_client.h"

namespace tahua {

namespace bj = boost::json;

namespace {

// spec.replicas of a Scale object (absent: 0, as the API server reads it).
std::optional<int> replicasOf(const std::string& body) {
  boost::system::error_code ec;
  bj::value v = readJson(body, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const bj::value* spec = v.get_object().if_contains("spec");
  if (!spec || !spec->is_object()) return std::nullopt;
  const bj::value* r = spec->get_object().if_contains("replicas");
  if (!r) return 0;
  if (!r->is_int64() || r->get_int64() < 0 || r->get_int64() > 1'000'000) return std::nullopt;
  return static_cast<int>(r->get_int64());
}

std::string failure(const KubeResponse& r) {
  return r.status ? std::to_string(r.status) + " " + r.body.substr(0, 200) : r.error;
}

}  // namespace

boost::asio::awaitable<ScaleResult> DeploymentScaler::scale(ScaleOrder order) {
  ScaleResult out;
  const std::string path =
      "/apis/apps/v1/namespaces/" + client_.config().namespace_ + "/deployments/" + order.deployment + "/scale";
  const KubeResponse got = co_await client_.call("GET", path);
  if (got.status != 200) {
    out.error = "GET " + path + ": " + failure(got);
    co_return out;
  }
  const auto current = replicasOf(got.body);
  if (!current) {
    out.error = "GET " + path + ": not a Scale object with spec.replicas";
    co_return out;
  }
  out.from = out.to = *current;
  int target = *current;
  if (order.up) {
    target = std::max(*current, std::clamp(order.replicas, order.min, order.max));
    if (target > *current) before_.try_emplace(order.deployment, *current);
  } else {
    auto it = before_.find(order.deployment);
    if (it == before_.end()) {
      out.error = "nothing to undo: this process did not raise its replicas (restarted since?); left at " + std::to_string(*current);
      co_return out;
    }
    target = std::min(*current, std::clamp(it->second, order.min, order.max));
    before_.erase(it);
  }
  if (target == *current) co_return out;
  const std::string patch = bj::serialize(bj::object{{"spec", bj::object{{"replicas", target}}}});
  const KubeResponse patched = co_await client_.call("PATCH", path, patch, "application/merge-patch+json");
  if (patched.status != 200) {
    if (order.up) before_.erase(order.deployment);
    out.error = "PATCH " + path + ": " + failure(patched);
    co_return out;
  }
  out.to = replicasOf(patched.body).value_or(target);
  co_return out;
}

}  // namespace tahua
