// Tool-definition pinning (the "rug pull": a server that changes a tool's description
// after it was approved, to steer the agent). The first definition of each tool seen is
// approved; a different one later is held (its record keeps it as `pending` until an admin
// approves it, /admin/v1/mcp/tools) and the tool hidden. The records live in the state
// store (namespace mcp_tools, id "server/tool"), so every replica enforces the same
// approval; each worker keeps what it needs of them (the fingerprints) and reads them
// again only when the store's records changed, so a call takes no lock and copies nothing.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tahua {

class StateStore;
struct WorkerMetrics;

namespace mcp {

// The state store records of tool pins (namespace "mcp_tools", id "<server>/<tool>").
constexpr std::string_view kPinNamespace = "mcp_tools";

class ToolPins {
 public:
  ToolPins(StateStore& store, WorkerMetrics& metrics) : store_(store), metrics_(metrics) {}

  // Whether `tool` of `server`, defined as `definition` (its fingerprint `fingerprint`),
  // may be shown and called: pinned now if never seen, held if it changed.
  bool holds(const std::string& server, std::string_view tool, std::string_view fingerprint, const boost::json::object& definition);

 private:
  struct Pin {
    std::string approved;  // fingerprints; "" with `readable` false: a damaged record (held)
    std::string pending;
    bool readable = true;
  };
  void refresh();

  StateStore& store_;
  WorkerMetrics& metrics_;
  std::unordered_map<std::string, Pin> pins_;  // by "server/tool"
  std::uint64_t generation_ = std::numeric_limits<std::uint64_t>::max();
};

}  // namespace mcp
}  // namespace tahua
