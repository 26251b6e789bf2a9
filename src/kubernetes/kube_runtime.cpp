#include "kubernetes/kube_runtime.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <future>

#include "kubernetes/kube_client.h"
#include "core/thread_name.h"

namespace tahua {

namespace asio = boost::asio;

struct KubeRuntime::Loop {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(io);
};

KubeRuntime::KubeRuntime(KubernetesConfig config)
    : loop_(std::make_unique<Loop>()),
      client_(std::make_unique<KubeClient>(loop_->io, std::move(config))),
      scaler_(*client_) {}

KubeRuntime::~KubeRuntime() { stop(); }

const KubernetesConfig& KubeRuntime::config() const { return client_->config(); }

void KubeRuntime::start(KubeResourceWatch::Changed changed) {
  if (changed) {
    watch_ = std::make_unique<KubeResourceWatch>(*client_, std::move(changed), stats_);
    for (const KubeKind& kind : kKubeKinds) asio::co_spawn(loop_->io, watch_->watchKind(kind), asio::detached);
  }
  thread_ = std::thread([this] {
    nameThisThread("tahua-kube");
    loop_->io.run();
  });
}

void KubeRuntime::stop() {
  if (!thread_.joinable()) return;
  std::promise<void> cancelled;
  asio::post(loop_->io, [this, &cancelled] {
    client_->cancel();  // open calls end; the watches see it and return
    cancelled.set_value();
  });
  cancelled.get_future().wait();
  // Whatever still waits (a retry's pause) is dropped with the io_context.
  loop_->guard.reset();
  loop_->io.stop();
  thread_.join();
}

asio::awaitable<ScaleResult> KubeRuntime::scale(ScaleOrder order) {
  co_return co_await asio::co_spawn(loop_->io, scaler_.scale(std::move(order)), asio::use_awaitable);
}

}  // namespace tahua
