#include "filters/mcp/mcp_sessions.h"

#include <openssl/rand.h>

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>

#include "core/json_read.h"
#include "core/log.h"
#include "filters/mcp/mcp_messages.h"
#include "filters/worker_services.h"
#include "store/state_store.h"
#include "translate/json_util.h"

namespace tahua::mcp {

namespace bj = boost::json;

namespace {

using Status = StateStore::ValueResult::Status;
constexpr std::size_t kMaxSessionsCached = 10'000;

std::string sessionKey(std::string_view sid) { return std::string(StateStore::kValuePrefix).append("mcp:").append(sid); }
std::string upstreamKey(std::string_view sid, std::string_view server) { return sessionKey(sid).append(":").append(server); }

// An upstream session's record ({"session","protocol"}); none if it is damaged.
std::optional<UpstreamSession> upstreamOf(std::string_view record, std::string_view protocol) {
  boost::system::error_code ec;
  const bj::value v = readJson(record, ec);
  if (ec || !v.is_object()) return std::nullopt;
  return UpstreamSession{std::string(json::strOr(v.get_object(), "session")), std::string(json::strOr(v.get_object(), "protocol", protocol))};
}

// A call the gateway makes itself to `server`.
WorkerServices::ModelCall gatewayCall(const McpConfig& cfg, const std::string& server) {
  WorkerServices::ModelCall call;
  call.model = "mcp:" + server;
  call.endpoint = Endpoint::Mcp;
  call.timeout = cfg.call_timeout;
  call.max_response_bytes = cfg.max_response_bytes;
  return call;
}

}  // namespace

std::int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string newSessionId() {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return {};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

bool validSessionId(std::string_view id) {
  return id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

void Sessions::remember(const std::string& sid, SessionPtr s) {
  if (cache_.size() >= kMaxSessionsCached) cache_.clear();  // a cache: the store has them all
  cache_[sid] = std::move(s);
}

void Sessions::keep(const std::string& sid, SessionPtr s, std::function<void(bool)> done) {
  bj::object record{{"owner", s->owner}, {"scope", s->scope}, {"protocol", s->protocol}, {"expires_ms", s->expires_ms},
                    {"capabilities", s->capabilities}};
  const Millis ttl(std::max<std::int64_t>(s->expires_ms - nowMs(), 1000));
  store_.putValue(sessionKey(sid), bj::serialize(record), ttl, [this, s, sid, done = std::move(done)](std::optional<std::string> error) {
    if (error) {
      log::error("cannot keep an MCP session", {{"error", *error}});
      return done(false);
    }
    remember(sid, s);
    done(true);
  });
}

void Sessions::find(const std::string& sid, const std::string& owner, const std::string& scope, std::function<void(Lookup, SessionPtr)> done) {
  if (!validSessionId(sid)) return done(Lookup::NotFound, nullptr);
  if (auto it = cache_.find(sid); it != cache_.end()) {
    if (it->second->expires_ms > nowMs() && it->second->owner == owner && it->second->scope == scope) return done(Lookup::Found, it->second);
    if (it->second->expires_ms <= nowMs()) cache_.erase(it);
    return done(Lookup::NotFound, nullptr);
  }
  // Fresh: a session opened through another replica is used at once.
  store_.getFreshValue(sessionKey(sid), [this, sid, owner, scope, done = std::move(done)](StateStore::ValueResult r) {
    if (r.status == Status::Unavailable) return done(Lookup::StoreDown, nullptr);
    if (r.status != Status::Found) return done(Lookup::NotFound, nullptr);
    boost::system::error_code ec;
    const bj::value v = readJson(r.value, ec);
    if (ec || !v.is_object()) return done(Lookup::NotFound, nullptr);
    auto s = std::make_shared<Session>();
    s->owner = std::string(json::strOr(v.get_object(), "owner"));
    s->scope = std::string(json::strOr(v.get_object(), "scope"));
    s->protocol = std::string(json::strOr(v.get_object(), "protocol", kRevisions[0]));
    const bj::value* e = v.get_object().if_contains("expires_ms");
    s->expires_ms = e && e->is_int64() ? e->get_int64() : 0;
    if (const bj::object* caps = json::obj(v.get_object(), "capabilities")) s->capabilities = *caps;
    if (s->expires_ms <= nowMs() || s->owner != owner || s->scope != scope) return done(Lookup::NotFound, nullptr);
    remember(sid, s);
    done(Lookup::Found, std::move(s));
  });
}

void Sessions::end(const McpConfig& cfg, const std::string& sid, SessionPtr s, std::function<void(bool)> done) {
  cache_.erase(sid);
  // The store knows every upstream session, whoever opened it (another worker, another
  // replica); this worker's copy adds one the store could not keep. The gateway's
  // session goes once every server's was looked up.
  auto left = std::make_shared<std::size_t>(1);
  auto finish = [this, sid, left, done = std::move(done)] {
    if (--*left > 0) return;
    store_.eraseValue(sessionKey(sid), [done](std::optional<std::string> error) { done(!error); });
  };
  for (const ModelConfig& t : cfg.targets) {
    const std::string& server = t.deployments.front().provider;
    if (!s->scope.empty() && server != s->scope) continue;
    ++*left;
    store_.getFreshValue(upstreamKey(sid, server), [this, &cfg, sid, s, server, finish](StateStore::ValueResult r) {
      std::vector<UpstreamSession> ups;
      if (auto up = r.status == Status::Found ? upstreamOf(r.value, s->protocol) : std::nullopt) ups.push_back(std::move(*up));
      if (auto it = s->upstream.find(server); it != s->upstream.end() && (ups.empty() || ups.front().id != it->second.id))
        ups.push_back(it->second);
      if (r.status == Status::Unavailable)
        log::warn("cannot read an MCP session's upstream session to end it: only this worker's is ended", {{"server", server}});
      else
        store_.eraseValue(upstreamKey(sid, server), [](std::optional<std::string>) {});
      for (const UpstreamSession& up : ups)
        if (!up.id.empty()) endUpstream(cfg, server, up);
      finish();
    });
  }
  finish();
}

void Sessions::endUpstream(const McpConfig& cfg, const std::string& server, const UpstreamSession& up) {
  WorkerServices::ModelCall call = gatewayCall(cfg, server);
  call.method = "DELETE";
  call.headers = headersOf(up);
  services_.callModel(std::move(call), [](OutboundResponse) {});
}

void Sessions::withUpstream(const McpConfig& cfg, const std::string& sid, SessionPtr s, const std::string& server, std::function<void(bool)> next) {
  if (s->upstream.contains(server)) return next(true);
  if (auto it = s->opening.find(server); it != s->opening.end()) return it->second.push_back(std::move(next));
  s->opening[server];
  next = [s, server, first = std::move(next)](bool ok) {
    auto waiting = std::move(s->opening[server]);
    s->opening.erase(server);
    first(ok);
    for (auto& w : waiting) w(ok && s->upstream.contains(server));
  };
  // Fresh: another replica may have opened it a moment ago (a second one would be left
  // behind, never ended).
  store_.getFreshValue(upstreamKey(sid, server), [this, &cfg, sid, s, server, next = std::move(next)](StateStore::ValueResult r) mutable {
    if (auto up = r.status == Status::Found ? upstreamOf(r.value, s->protocol) : std::nullopt) {
      s->upstream[server] = std::move(*up);
      return next(true);
    }
    if (r.status == Status::Unavailable) return next(false);
    open(cfg, sid, s, server, std::move(next));
  });
}

void Sessions::open(const McpConfig& cfg, const std::string& sid, SessionPtr s, const std::string& server, std::function<void(bool)> next,
                    std::shared_ptr<bj::object> result_out) {
  // The client's capabilities go only to the server of a scoped session: on /mcp the
  // gateway could not tell which server a client's answer is for.
  bj::object params{{"protocolVersion", s->protocol},
                    {"capabilities", server == s->scope ? s->capabilities : bj::object()},
                    {"clientInfo", bj::object{{"name", "tahua"}, {"version", "1"}}}};
  bj::object init{{"jsonrpc", "2.0"}, {"id", "tahua-initialize"}, {"method", "initialize"}, {"params", std::move(params)}};
  call(cfg, server, bj::serialize(init), {}, [this, &cfg, sid, s, server, next = std::move(next), result_out](OutboundResponse r) mutable {
    auto answer = answerTo(r, "\"tahua-initialize\"");
    const bj::object* result = answer ? json::obj(*answer, "result") : nullptr;
    if (!result) {
      log::warn("an MCP server did not initialize a session", {{"server", server}, {"status", r.status}, {"error", r.error}});
      return next(false);
    }
    UpstreamSession up;
    for (const auto& [name, value] : r.headers)
      if (name == "mcp-session-id") up.id = value;
    up.protocol = std::string(json::strOr(*result, "protocolVersion", s->protocol));
    if (result_out) *result_out = *result;
    call(cfg, server, R"({"jsonrpc":"2.0","method":"notifications/initialized"})", headersOf(up),
         [this, sid, s, server, up, next = std::move(next)](OutboundResponse) mutable {
           s->upstream[server] = up;
           const Millis ttl(std::max<std::int64_t>(s->expires_ms - nowMs(), 1000));
           bj::object record{{"session", up.id}, {"protocol", up.protocol}};
           store_.putValue(upstreamKey(sid, server), bj::serialize(record), ttl, [server](std::optional<std::string> error) {
             if (error) log::warn("cannot keep an MCP upstream session: another replica will open its own", {{"server", server}, {"error", *error}});
           });
           next(true);
         });
  });
}

void Sessions::forget(const std::string& sid, Session& s, const std::string& server) {
  s.upstream.erase(server);
  store_.eraseValue(upstreamKey(sid, server), [](std::optional<std::string>) {});
}

void Sessions::call(const McpConfig& cfg, const std::string& server, std::string body, Headers headers, std::function<void(OutboundResponse)> done) {
  WorkerServices::ModelCall call = gatewayCall(cfg, server);
  call.body = std::move(body);
  call.headers = std::move(headers);
  services_.callModel(std::move(call), std::move(done));
}

Headers Sessions::headersOf(const UpstreamSession& up) {
  Headers h = {{"MCP-Protocol-Version", up.protocol}};
  if (!up.id.empty()) h.emplace_back("Mcp-Session-Id", up.id);
  return h;
}

}  // namespace tahua::mcp
