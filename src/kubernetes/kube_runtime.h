// The gateway's link to the Kubernetes API (config `kubernetes`): its own thread and
// io_context, so a slow or hanging API server never touches a worker. Lists and watches
// the resource kinds (with `kubernetes.resources`) and carries out self-healing's scale
// actions. Set up at start from the first config; a reload does not move it.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <memory>
#include <thread>

#include "kubernetes/deployment_scale.h"
#include "kubernetes/resource_watch.h"

namespace tahua {

class KubeRuntime {
 public:
  explicit KubeRuntime(KubernetesConfig config);
  ~KubeRuntime();

  // Starts the thread and, with `changed`, the resource watch (`changed` is called on
  // the Kubernetes thread with every kind's resources, after all were listed once).
  void start(KubeResourceWatch::Changed changed);
  // Closes the API connections and joins the thread.
  void stop();

  // From any coroutine: runs on the Kubernetes thread.
  boost::asio::awaitable<ScaleResult> scale(ScaleOrder order);

  const KubernetesConfig& config() const;
  bool watching() const { return watch_ != nullptr; }
  const KubeWatchStats& stats() const { return stats_; }

 private:
  struct Loop;
  std::unique_ptr<Loop> loop_;  // io_context and work guard: destroyed last
  std::unique_ptr<KubeClient> client_;
  DeploymentScaler scaler_;
  KubeWatchStats stats_;
  std::unique_ptr<KubeResourceWatch> watch_;
  std::thread thread_;
};

}  // namespace tahua
