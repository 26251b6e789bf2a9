// tahua.dev/v1 resources from the Kubernetes API: each kind listed, then watched from
// the list's resourceVersion (events ADDED, MODIFIED, DELETED, BOOKMARK); a watch that
// ends is resumed from the last resourceVersion seen; "410 Gone" (the version was
// compacted away, as an HTTP status or as an ERROR event) lists again. Every change
// hands the whole set to `changed`, which applies it like the state store's resources
// (applyStoredResources), so a `kubectl apply` is live within one round trip.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace tahua {

class KubeClient;

// The kinds, with their plural (the API path) names.
struct KubeKind {
  std::string_view kind;
  std::string_view plural;
};
extern const KubeKind kKubeKinds[5];

// One object of a list or a watch event: its name, resourceVersion and spec (as JSON).
struct KubeObject {
  std::string name;
  std::string resource_version;
  std::string spec;
};
struct KubeList {
  std::string resource_version;
  std::vector<KubeObject> items;
};
// A list answer's body; nullopt and `error` when it is not one.
std::optional<KubeList> parseKubeList(std::string_view body, std::string_view kind, std::string& error);

struct KubeEvent {
  enum class Type { Added, Modified, Deleted, Bookmark, Error };
  Type type = Type::Error;
  KubeObject object;
  int code = 0;         // Error: the Status's code (410: the version is gone)
  std::string message;  // Error: the Status's message
};
// One watch line; nullopt and `error` when it is not an event.
std::optional<KubeEvent> parseKubeEvent(std::string_view line, std::string_view kind, std::string& error);

// What the watch has found, for metrics and readiness. Read from any thread.
struct KubeWatchStats {
  std::atomic<bool> listed{false};        // every kind listed once, and the config with them published
  std::atomic<std::uint64_t> lists{0};    // lists done (the first ones included)
  std::atomic<std::uint64_t> events{0};   // watch events applied
  std::atomic<std::uint64_t> errors{0};   // failed calls (each retried)
  std::atomic<std::uint64_t> resources{0};
};

class KubeResourceWatch {
 public:
  using Changed = std::function<void(std::vector<StoredResource>)>;
  KubeResourceWatch(KubeClient& client, Changed changed, KubeWatchStats& stats);

  // Runs until the client is cancelled (the gateway stops); spawn one per kind, on the
  // client's io_context.
  boost::asio::awaitable<void> watchKind(const KubeKind& kind);

 private:
  // Hands the whole set over once the current read's events are applied (posted, so a
  // burst of events in one read is one change), and only after every kind is listed.
  void changedSoon();
  std::string path(const KubeKind& kind) const;

  KubeClient& client_;
  Changed changed_;
  KubeWatchStats& stats_;
  std::map<std::string, std::map<std::string, std::string>, std::less<>> objects_;  // kind -> name -> spec
  std::size_t kinds_listed_ = 0;
  bool change_posted_ = false;
  bool stopping_ = false;
};

}  // namespace tahua
