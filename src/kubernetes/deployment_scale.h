// Self-healing's `scale` action on the cluster: a Deployment's replicas read through its
// /scale subresource and set with a merge patch. Up to `replicas` when the rule fires
// (never down: someone, or an autoscaler, may have asked for more), and back to what
// it had when the rule is undone (never below what was remembered, never outside
// min..max). The patch sets an absolute count, so replicas of tahua that decide the
// same (node reports are shared through the store) ask for the same thing.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <map>
#include <optional>
#include <string>

namespace tahua {

class KubeClient;

struct ScaleOrder {
  std::string deployment;
  bool up = true;  // false: undo
  int replicas = 0;
  int min = 1;
  int max = 10;
};

struct ScaleResult {
  std::optional<int> from, to;  // to == from: nothing patched
  std::string error;
};

class DeploymentScaler {
 public:
  explicit DeploymentScaler(KubeClient& client) : client_(client) {}
  // On the client's io_context.
  boost::asio::awaitable<ScaleResult> scale(ScaleOrder order);

 private:
  KubeClient& client_;
  std::map<std::string, int> before_;  // deployment -> replicas before the rule raised them
};

}  // namespace tahua
