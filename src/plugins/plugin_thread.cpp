#include "plugins/plugin_thread.h"

#include <pthread.h>
#include <sched.h>

namespace tahua {

PluginThread::PluginThread() : thread_([this] { run(); }) {}

PluginThread::~PluginThread() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void PluginThread::post(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void PluginThread::run() {
  ::pthread_setname_np(::pthread_self(), "tahua-plugins");
  sched_param param{};
  ::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &param);  // no error is fatal: the calls still run
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    lock.lock();
  }
}

}  // namespace tahua
