// The MCP gateway's sessions: the gateway's own (what its client holds, Mcp-Session-Id)
// and, beside each, one upstream session per server it has talked to. Kept in the state
// store (so another replica continues a session) and cached per worker, without locks.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config/config.h"
#include "http/outbound_call.h"

namespace tahua {

class StateStore;
class WorkerServices;

namespace mcp {

struct UpstreamSession {
  std::string id;  // "" : the server keeps no sessions
  std::string protocol;
};

struct Session {
  std::string owner;  // "<tenant>/<key>" of the caller that opened it
  std::string scope;  // the server of the /mcp/{server} path it was made on; "": /mcp
  std::string protocol;
  std::int64_t expires_ms = 0;
  // The client's capabilities (initialize): declared to the server of a scoped session,
  // whose requests to the client (sampling, elicitation, roots) are relayed.
  boost::json::object capabilities;
  std::map<std::string, UpstreamSession, std::less<>> upstream;  // by server
  // Requests waiting for an upstream session this worker is opening: a client's first
  // call and its GET stream come together, and both must get the same upstream session.
  std::map<std::string, std::vector<std::function<void(bool)>>, std::less<>> opening;
  // The client's GET streams being opened upstream on this worker, and the calls waiting
  // for them: a server sends its own requests (sampling, elicitation) on that stream and
  // does not deliver them while there is none, so a call that overtook the GET would wait
  // for an answer that never comes.
  std::size_t streams_opening = 0;
  std::vector<std::function<void()>> after_streams;
};
using SessionPtr = std::shared_ptr<Session>;

using Headers = std::vector<std::pair<std::string, std::string>>;

// 128 bits from the system's CSPRNG as hex ("" if it failed): a session id is a bearer
// of the caller's session.
std::string newSessionId();
bool validSessionId(std::string_view id);
std::int64_t nowMs();  // wall clock: expiry times are shared by replicas

class Sessions {
 public:
  Sessions(StateStore& store, WorkerServices& services) : store_(store), services_(services) {}

  // Stores a new session; `done(false)`: the store could not keep it (logged).
  void keep(const std::string& sid, SessionPtr s, std::function<void(bool)> done);

  enum class Lookup { Found, NotFound, StoreDown };
  // The session `sid` if it is live and `owner`'s on `scope`: this worker's cache, else
  // the store (another replica may have made it). Another caller's session is NotFound,
  // as an unknown one is.
  void find(const std::string& sid, const std::string& owner, const std::string& scope, std::function<void(Lookup, SessionPtr)> done);

  // Ends a session: every upstream session it holds (the store's, whichever worker or
  // replica opened them, and this worker's) is ended without waiting for its server;
  // `done(false)`: the store did not answer.
  void end(const McpConfig& cfg, const std::string& sid, SessionPtr s, std::function<void(bool)> done);

  // The session with `server` for `sid`: known, kept by another replica, or opened now.
  // `next(false)`: the server did not answer (logged).
  void withUpstream(const McpConfig& cfg, const std::string& sid, SessionPtr s, const std::string& server, std::function<void(bool)> next);
  // Opens one now (initialize, then the initialized notification); the server's
  // initialize result goes to `result` when given.
  void open(const McpConfig& cfg, const std::string& sid, SessionPtr s, const std::string& server, std::function<void(bool)> next,
            std::shared_ptr<boost::json::object> result = nullptr);
  // A server answered 404 to its session: it ended it; the next request opens a new one.
  void forget(const std::string& sid, Session& s, const std::string& server);

  // A call the gateway makes itself to `server` (bounded by mcp.call_timeout and
  // mcp.max_response_bytes).
  void call(const McpConfig& cfg, const std::string& server, std::string body, Headers headers, std::function<void(OutboundResponse)> done);
  static Headers headersOf(const UpstreamSession& up);

 private:
  void remember(const std::string& sid, SessionPtr s);
  void endUpstream(const McpConfig& cfg, const std::string& server, const UpstreamSession& up);

  StateStore& store_;
  WorkerServices& services_;
  std::unordered_map<std::string, SessionPtr> cache_;  // the store has them all
};

}  // namespace mcp
}  // namespace tahua
