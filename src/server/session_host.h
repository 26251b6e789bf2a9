// What a client connection needs from the worker it runs on, and through it from the
// gateway (readiness, the metrics page, the admin API). Narrow on purpose: server/ does
// not depend on runtime/, which creates the sessions; the worker implements this.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "providers/snapshot.h"

namespace boost::asio {
class io_context;
}

namespace tahua {

class FilterChain;
struct WorkerMetrics;
struct UpstreamEnv;

// A client connection as its worker sees it: drain and the heartbeat sweep.
class SessionBase {
 public:
  virtual ~SessionBase() = default;
  // Drain began: close now if waiting for a next request; otherwise finish the current
  // one and close after it.
  virtual void closeIfIdle() = 0;
  // Drain deadline passed: end whatever is in flight (streams get a final event).
  virtual void abortForDrain() = 0;
  // Called every heartbeat sweep: a session relaying an idle stream writes a comment.
  virtual void heartbeatTick(std::chrono::steady_clock::time_point now) = 0;
  // Called at the watch tick after SessionHost::watchSoon: start watching the client.
  virtual void armClientWatch() = 0;

 private:
  friend class Worker;  // keeps its sessions in intrusive lists
  SessionBase* prev_ = nullptr;
  SessionBase* next_ = nullptr;
  SessionBase* watch_prev_ = nullptr;  // in the list of sessions waiting for the watch tick
  SessionBase* watch_next_ = nullptr;
  bool watch_queued_ = false;
};

// An answer of the admin API.
struct AdminReply {
  int status = 200;
  std::string body;
  std::string_view content_type = "application/json";  // a literal
  std::vector<std::pair<std::string_view, std::string>> headers = {};  // more headers (names: literals)
};

class SessionHost {
 public:
  virtual boost::asio::io_context& io() = 0;
  virtual unsigned id() const = 0;
  // The current snapshot and the filter chain built from it; a request pins both.
  virtual const SnapshotPtr& snapshot() const = 0;
  virtual const std::shared_ptr<FilterChain>& chain() const = 0;
  virtual bool draining() const = 0;
  virtual bool drainDeadlinePassed() const = 0;
  // The next request id, written over `into` (a session reuses its string's memory).
  virtual void nextRequestId(std::string& into) = 0;
  virtual WorkerMetrics& metrics() = 0;
  virtual UpstreamEnv& upstreamEnv() = 0;
  // `admin`: accepted on the admin listener (counted apart: its cap is its own).
  virtual void registerSession(SessionBase* s, bool admin) = 0;
  virtual void unregisterSession(SessionBase* s, bool admin) = 0;
  // Watching a client for a hang-up costs a system call (a peek that finds nothing), so
  // a request only starts to at the worker's next watch tick (within kWatchDelay): one
  // answered sooner never pays for it. armClientWatch() is called then, unless
  // watchSoonCancel() came first.
  virtual void watchSoon(SessionBase* s) = 0;
  virtual void watchSoonCancel(SessionBase* s) = 0;
  static constexpr std::chrono::milliseconds kWatchDelay{50};

  // Answers the gateway gives itself.
  // /readyz: whether this replica should take traffic, and (with
  // server.readiness.require_models) each required model's state as a JSON object's
  // members ("name":"ok" | "no_usable_deployment", ...).
  struct Readiness {
    bool ready = false;
    std::string models;
    bool resources_listed = true;  // false: Kubernetes resources are watched and not listed yet
  };
  virtual Readiness readiness(const Config& config) const = 0;
  virtual bool gatewayDraining() const = 0;
  virtual boost::asio::awaitable<std::string> renderMetrics() = 0;
  virtual boost::asio::awaitable<AdminReply> admin(std::string_view method, std::string_view path,
                                                   std::string_view authorization, std::string_view accept,
                                                   std::string& body) = 0;

 protected:
  ~SessionHost() = default;
};

}  // namespace tahua
