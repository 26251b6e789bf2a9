// The thread a worker's long plugin calls run on: a call that outlives its first slice
// on the event loop continues here, at the lowest CPU priority Linux has (SCHED_IDLE),
// so a looping plugin takes only CPU time that nothing else on the machine wants, and
// the worker's loop goes on serving other requests at full speed. One per plugin filter
// (per worker and config), started with the first long call.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace tahua {

class PluginThread {
 public:
  PluginThread();
  // Finishes the job in progress (a plugin call, bounded by its budget) and stops.
  ~PluginThread();
  PluginThread(const PluginThread&) = delete;
  PluginThread& operator=(const PluginThread&) = delete;

  void post(std::function<void()> job);

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace tahua
