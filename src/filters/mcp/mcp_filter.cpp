#include "filters/mcp/mcp_filter.h"

#include <boost/json.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/json_read.h"
#include "core/log.h"
#include "core/sha256.h"
#include "filters/mcp/mcp_messages.h"
#include "filters/mcp/mcp_sessions.h"
#include "filters/mcp/tool_pins.h"
#include "filters/mcp/tool_arguments.h"
#include "filters/worker_services.h"
#include "sse/sse_parser.h"
#include "store/state_store.h"
#include "telemetry/metrics.h"
#include "translate/json_util.h"

namespace tahua {

namespace bj = boost::json;
using namespace std::chrono_literals;

namespace {

using mcp::nowMs;
using mcp::Session;
using mcp::SessionPtr;
using mcp::UpstreamSession;

// Who a session belongs to: the caller's tenant and key (auth off: nobody, "/").
std::string ownerOf(const RequestContext& ctx) {
  std::string owner = ctx.principal.tenant ? ctx.principal.tenant->name : std::string();
  owner += '/';
  if (ctx.principal.key) owner += ctx.principal.key->name;
  return owner;
}

struct ToolEntry {
  bj::object definition;  // as the server gave it
  std::string fingerprint;
  std::shared_ptr<const ArgumentSchema> schema;  // null: not checkable (logged once)
};
struct Catalog {
  std::map<std::string, ToolEntry, std::less<>> tools;  // by the server's own name
  std::chrono::steady_clock::time_point fetched{};
};

// The list methods and the field their items come in.
struct ListKind {
  std::string_view method;
  std::string_view field;
  bool named;  // items carry a `name` the gateway qualifies (tools, prompts)
};
constexpr ListKind kLists[] = {{"tools/list", "tools", true},
                               {"prompts/list", "prompts", true},
                               {"resources/list", "resources", false},
                               {"resources/templates/list", "resourceTemplates", false}};
constexpr std::size_t kMaxPages = 16;
constexpr auto kCatalogFresh = 60s;

// One /mcp request's work (allocated for those only).
struct Call {
  std::string id = "null";  // the request's JSON-RPC id, as JSON
  std::string method;
  bj::object message;
  std::string session_id;
  SessionPtr session;
  std::string scope;  // /mcp/{server}: that server ("": the merged endpoint)
  // A call routed to a server.
  std::string server;
  UpstreamSession upstream;
  // What the records say: the JSON-RPC method, a tool's qualified name, its outcome, its
  // arguments (mcp.audit_arguments).
  std::string tool;
  std::string outcome;
  std::string arguments;
  bool known_tool = false;  // the tool exists (its name may be a metric label)
  std::string reply_session;  // Mcp-Session-Id to send (initialize)
  std::size_t relayed = 0;
  bool stream_opening = false;  // a GET whose upstream head has not come (Session::streams_opening)
  std::unique_ptr<SseParser> parser;  // a routed call's stream, watched for its outcome
  bool answered = false;              // its response event went by
  bool open_event = false;            // the stream relayed so far ends inside an event
  // Settling: an asynchronous step finishes the request's phase once.
  bool sync = false;
  std::optional<FilterStatus> result;
  RequestContext* ctx = nullptr;
  void done(FilterStatus s) {
    if (sync) result = s;
    else ctx->resumer->resume(s);
  }
};

struct McpState {
  std::unique_ptr<Call> call;
};

// The outcome of a routed call from the JSON-RPC response it got.
std::string_view outcomeOf(const bj::object& response) {
  if (response.contains("error")) return "error";
  const bj::value* r = response.if_contains("result");
  if (r && r->is_object()) {
    const bj::value* e = r->get_object().if_contains("isError");
    if (e && e->is_bool() && e->get_bool()) return "tool_error";
  }
  return "ok";
}

// A call's outcome when its answer's head is known: a refusal of the gateway's (a limit,
// a plugin, the key: the call never reached the server), a guardrail's block, or what the
// status says until the answer's body tells more.
std::string_view outcomeAtHead(const RequestContext& ctx) {
  if (!ctx.error) return ctx.status >= 200 && ctx.status < 300 ? "ok" : "failed";
  if (ctx.error->kind == ErrorKind::ContentBlocked) return "blocked";
  if (ctx.attempts == 0 && (ctx.error->httpStatus() == 429 || ctx.error->source() == ErrorSource::Client)) return "refused";
  return "failed";
}

class OutcomeSink final : public SseSink {
 public:
  explicit OutcomeSink(Call& c) : c_(c) {}
  void onEvent(const SseEvent& e) override {
    if (c_.answered || e.data.find("\"id\"") == std::string_view::npos) return;
    boost::system::error_code ec;
    bj::value v = readJson(e.data, ec);
    if (ec || !v.is_object()) return;
    const bj::value* id = v.get_object().if_contains("id");
    if (id && bj::serialize(*id) == c_.id) {
      c_.outcome = outcomeOf(v.get_object());
      c_.answered = true;
    }
  }

 private:
  Call& c_;
};

// The outcome goes into the records as soon as it is known: the access log and the
// usage record are written by filters whose onComplete runs before this one's.
void setOutcome(RequestContext& ctx, Call& c, std::string_view outcome) {
  c.outcome = std::string(outcome);
  ctx.record_fields[static_cast<std::size_t>(RecordField::McpOutcome)] = c.outcome;
}

class McpFilter final : public FilterWithState<McpState> {
 public:
  McpFilter(StateStore& store, WorkerServices& services, WorkerMetrics& metrics)
      : metrics_(metrics), sessions_(store, services), pins_(store, metrics) {}

  std::string_view name() const override { return "mcp"; }
  bool wantsResponseData() const override { return true; }

  FilterStatus onRequestBody(RequestContext& ctx) override {
    if (!mcpEndpoint(ctx.endpoint)) return FilterStatus::Continue;
    McpState& st = state(ctx);
    st.call = std::make_unique<Call>();
    Call& c = *st.call;
    c.ctx = &ctx;
    c.sync = true;
    begin(ctx, c);
    c.sync = false;
    return c.result ? *c.result : FilterStatus::Pause;
  }

  void onUpstreamRequest(RequestContext& ctx, UpstreamRequestHeaders& headers) override {
    Call* c = state(ctx).call.get();
    if (!c || c->server.empty()) return;
    if (!c->upstream.id.empty()) headers.add("Mcp-Session-Id", c->upstream.id);
    headers.add("MCP-Protocol-Version", c->upstream.protocol);
    if (ctx.headers) {
      const std::string_view last = ctx.headers->get("last-event-id");
      if (!last.empty() && last.find_first_of("\r\n") == std::string_view::npos) headers.add("Last-Event-ID", last);
    }
  }

  void onResponseHeaders(RequestContext& ctx) override {
    Call* c = state(ctx).call.get();
    if (!c) return;
    streamSettled(*c);
    if (!c->reply_session.empty() && ctx.response_headers) ctx.response_headers->emplace_back("Mcp-Session-Id", c->reply_session);
    // Until the answer says otherwise (its body, its stream's last event).
    if (!c->tool.empty() && c->outcome.empty()) setOutcome(ctx, *c, outcomeAtHead(ctx));
  }

  void onResponseData(RequestContext& ctx, ResponseData& data) override {
    Call* c = state(ctx).call.get();
    if (!c || c->server.empty()) return;
    if (data.aborted()) {
      if (!c->tool.empty()) setOutcome(ctx, *c, "failed");
      return;
    }
    c->relayed += data.bytes().size();
    if (c->relayed > ctx.config->mcp.max_response_bytes) {
      setOutcome(ctx, *c, "too_large");
      // None of the piece over the bound goes out; an event the pieces before it left
      // open is closed, so the error event that ends the stream is read as one.
      data.replace(c->open_event ? "\n\n" : "");
      data.fail(Error{ErrorKind::UpstreamBadResponse, "The MCP server's answer is larger than mcp.max_response_bytes allows."});
      return;
    }
    if (const std::string_view b = data.bytes(); !b.empty()) c->open_event = !b.ends_with("\n\n") && !b.ends_with("\r\n\r\n");
    if (!c->tool.empty()) {
      if (!c->parser) c->parser = std::make_unique<SseParser>(ctx.config->mcp.max_response_bytes);
      OutcomeSink sink(*c);
      c->parser->feed(data.bytes(), sink);
      setOutcome(ctx, *c, std::string(c->outcome));
    }
  }

  void onResponseBody(RequestContext& ctx, std::string& body) override {
    Call* c = state(ctx).call.get();
    if (!c || c->server.empty()) return;
    if (body.size() > ctx.config->mcp.max_response_bytes) {
      setOutcome(ctx, *c, "too_large");
      body = mcp::errorMessage(c->id, mcp::kInternalError, "The MCP server's answer is larger than mcp.max_response_bytes allows.");
      return;
    }
    if (c->tool.empty() || ctx.status < 200 || ctx.status >= 300) return;
    boost::system::error_code ec;
    bj::value v = readJson(body, ec);
    if (!ec && v.is_object()) setOutcome(ctx, *c, outcomeOf(v.get_object()));
  }

  void onComplete(RequestContext& ctx) override {
    Call* c = state(ctx).call.get();
    if (!c) return;
    streamSettled(*c);  // it failed before its head
    if (!c->server.empty() && ctx.status == 404 && c->session) sessions_.forget(c->session_id, *c->session, c->server);
    if (c->tool.empty()) return;
    if (c->outcome.empty()) c->outcome = "failed";  // no answer was written (the client went away)
    std::string_view server, tool;
    mcp::splitQualified(c->tool, server, tool);
    ++metrics_.mcp_tool_calls[{c->known_tool ? std::string(server) : std::string(), c->known_tool ? std::string(tool) : std::string(),
                               c->outcome}];
  }

 private:
  // ---- the request ------------------------------------------------------------------

  void begin(RequestContext& ctx, Call& c) {
    const std::string_view sid = ctx.headers ? ctx.headers->get("mcp-session-id") : std::string_view();
    c.session_id = std::string(sid);
    if (ctx.path.size() > 5) {
      c.scope = std::string(ctx.path.substr(5));
      if (!ctx.config->mcp.targetOf(c.scope))
        return reply(ctx, c, 404, mcp::errorMessage("null", mcp::kInvalidRequest, "Unknown MCP server \"" + c.scope + "\"."));
    }
    // DNS rebinding: a browser sends Origin; a page of another site must not drive a
    // gateway (or the servers behind it) that it reaches on the user's machine.
    if (const std::string_view origin = ctx.headers ? ctx.headers->get("origin") : std::string_view();
        !origin.empty() && !mcp::originAllowed(ctx.config->mcp, origin))
      return reply(ctx, c, 403, mcp::errorMessage("null", mcp::kInvalidRequest, "Forbidden: this Origin is not in mcp.allowed_origins."));
    if (ctx.method == "GET") {  // the server's own stream of messages (only on its path)
      if (sid.empty()) return reply(ctx, c, 400, mcp::errorMessage("null", mcp::kInvalidRequest, "Bad Request: the Mcp-Session-Id header is required."));
      return withSession(ctx, c, [this, &ctx, &c] { openStream(ctx, c); });
    }
    if (ctx.method == "DELETE") {
      if (sid.empty()) return reply(ctx, c, 400, mcp::errorMessage("null", mcp::kInvalidRequest, "Bad Request: the Mcp-Session-Id header is required."));
      return withSession(ctx, c, [this, &ctx, &c] { terminate(ctx, c); });
    }
    boost::system::error_code ec;
    bj::value v = readJson(ctx.body, ec);
    if (ec) return reply(ctx, c, 400, mcp::errorMessage("null", mcp::kParseError, "Parse error: the body is not JSON."));
    if (v.is_array())
      return reply(ctx, c, 400, mcp::errorMessage("null", mcp::kInvalidRequest, "JSON-RPC batches are not part of MCP 2025-06-18 and later: send one message per request."));
    if (!v.is_object() || json::strOr(v.get_object(), "jsonrpc") != "2.0")
      return reply(ctx, c, 400, mcp::errorMessage("null", mcp::kInvalidRequest, "Invalid Request: expected a JSON-RPC 2.0 message."));
    c.message = std::move(v.get_object());
    if (const bj::value* id = c.message.if_contains("id")) {
      if (!id->is_string() && !id->is_int64() && !id->is_uint64())
        return reply(ctx, c, 400, mcp::errorMessage("null", mcp::kInvalidRequest, "Invalid Request: an id is a string or an integer."));
      c.id = bj::serialize(*id);
    }
    const bj::value* method = c.message.if_contains("method");
    if (!method) return clientMessage(ctx, c);  // an answer to a server's request
    if (!method->is_string()) return reply(ctx, c, 400, mcp::errorMessage(c.id, mcp::kInvalidRequest, "Invalid Request: method is not a string."));
    c.method = std::string(method->get_string());
    ctx.record_fields[static_cast<std::size_t>(RecordField::McpMethod)] = c.method;
    const std::string_view version = ctx.headers ? ctx.headers->get("mcp-protocol-version") : std::string_view();
    if (!version.empty() && !mcp::knownRevision(version))
      return reply(ctx, c, 400, mcp::errorMessage(c.id, mcp::kInvalidRequest, "Bad Request: unsupported MCP-Protocol-Version " + std::string(version) + "."));
    if (c.method == "initialize") return initialize(ctx, c);
    if (!c.message.contains("id")) return clientMessage(ctx, c);  // a notification (initialized, cancelled, ...)
    if (sid.empty()) return reply(ctx, c, 400, mcp::errorMessage(c.id, mcp::kInvalidRequest, "Bad Request: the Mcp-Session-Id header is required."));
    withSession(ctx, c, [this, &ctx, &c] { dispatch(ctx, c); });
  }

  void dispatch(RequestContext& ctx, Call& c) {
    if (c.method == "ping") return reply(ctx, c, 200, mcp::resultMessage(c.id, bj::object()));
    for (const ListKind& kind : kLists)
      if (c.method == kind.method) return list(ctx, c, kind, nullptr);
    if (c.method == "tools/call") return callTool(ctx, c);
    if (c.method == "prompts/get") return getPrompt(ctx, c);
    if (c.method == "resources/read" || c.method == "resources/subscribe" || c.method == "resources/unsubscribe") return resourceCall(ctx, c);
    if (c.method == "completion/complete") return complete(ctx, c);
    if (c.method == "logging/setLevel") {
      if (!c.scope.empty()) return toScope(ctx, c);
      // On /mcp: which servers' logs would it set? Their levels are theirs to keep.
      return reply(ctx, c, 200, mcp::resultMessage(c.id, bj::object()));
    }
    reply(ctx, c, 200, mcp::errorMessage(c.id, mcp::kMethodNotFound, "Method not found: " + c.method));
  }

  // ---- answers ----------------------------------------------------------------------

  void reply(RequestContext& ctx, Call& c, int status, std::string body) {
    LocalReply r;
    r.status = status;
    r.body = std::move(body);
    ctx.local_reply = std::move(r);
    c.done(FilterStatus::Stop);
  }
  void accepted(RequestContext& ctx, Call& c) {
    LocalReply r;
    r.status = 202;
    ctx.local_reply = std::move(r);
    c.done(FilterStatus::Stop);
  }
  void storeUnavailable(RequestContext& ctx, Call& c) {
    reply(ctx, c, 503, mcp::errorMessage(c.id, mcp::kInternalError, "The gateway's state store cannot answer; please retry."));
  }

  // ---- sessions ---------------------------------------------------------------------

  void initialize(RequestContext& ctx, Call& c) {
    const bj::object* params = json::obj(c.message, "params");
    const std::string_view wanted = params ? json::strOr(*params, "protocolVersion") : std::string_view();
    auto s = std::make_shared<Session>();
    s->owner = ownerOf(ctx);
    s->scope = c.scope;
    s->protocol = std::string(mcp::negotiate(wanted));
    if (const bj::object* caps = params ? json::obj(*params, "capabilities") : nullptr) s->capabilities = *caps;
    s->expires_ms = nowMs() + ctx.config->mcp.session_ttl.count();
    const std::string sid = mcp::newSessionId();
    if (sid.empty()) return reply(ctx, c, 500, mcp::errorMessage(c.id, mcp::kInternalError, "No session id could be made."));
    if (s->scope.empty()) {
      bj::object caps{{"tools", bj::object{{"listChanged", false}}},
                      {"prompts", bj::object{{"listChanged", false}}},
                      {"resources", bj::object{{"subscribe", false}, {"listChanged", false}}},
                      {"completions", bj::object()},
                      {"logging", bj::object()}};
      return keepSession(ctx, c, s, sid,
                         bj::object{{"protocolVersion", s->protocol},
                                    {"capabilities", std::move(caps)},
                                    {"serverInfo", bj::object{{"name", "tahua"}, {"version", "1"}}},
                                    {"instructions", "Tools and prompts of several MCP servers, named <server>__<name>."}});
    }
    // A server's own path is that server, so its session opens now and the client is
    // told what the server can do (what the gateway relays of it).
    c.session = s;
    c.session_id = sid;
    auto theirs = std::make_shared<bj::object>();
    sessions_.open(ctx.config->mcp, sid, s, s->scope, [this, &ctx, &c, s, sid, theirs](bool ok) {
      if (!ok) return serverDown(ctx, c, s->scope);
      bj::object caps;
      if (const bj::object* offered = json::obj(*theirs, "capabilities"))
        for (std::string_view k : {"tools", "prompts", "resources", "completions", "logging"})
          if (const bj::value* v = offered->if_contains(k)) caps[k] = *v;
      bj::object result{{"protocolVersion", s->protocol},
                        {"capabilities", std::move(caps)},
                        {"serverInfo", bj::object{{"name", "tahua/" + s->scope}, {"version", "1"}}}};
      if (const bj::value* i = theirs->if_contains("instructions"); i && i->is_string()) result["instructions"] = *i;
      keepSession(ctx, c, s, sid, std::move(result));
    }, theirs);
  }

  void keepSession(RequestContext& ctx, Call& c, SessionPtr s, const std::string& sid, bj::object result) {
    sessions_.keep(sid, s, [this, &ctx, &c, sid, result = std::move(result)](bool ok) {
      if (!ok) return storeUnavailable(ctx, c);
      ++metrics_.mcp_sessions_total;
      c.reply_session = sid;
      reply(ctx, c, 200, mcp::resultMessage(c.id, result));
    });
  }

  // The caller's session, then `next`; an unknown, expired or another caller's session
  // is a 404, which tells the client to initialize again.
  void withSession(RequestContext& ctx, Call& c, std::function<void()> next) {
    sessions_.find(c.session_id, ownerOf(ctx), c.scope, [this, &ctx, &c, next = std::move(next)](mcp::Sessions::Lookup r, SessionPtr s) {
      if (r == mcp::Sessions::Lookup::StoreDown) return storeUnavailable(ctx, c);
      if (r == mcp::Sessions::Lookup::NotFound) return reply(ctx, c, 404, mcp::errorMessage(c.id, mcp::kInvalidRequest, "Session not found: initialize a new one."));
      c.session = std::move(s);
      next();
    });
  }

  // DELETE: the upstream sessions are ended (their servers are told, without waiting)
  // and the gateway's is forgotten.
  void terminate(RequestContext& ctx, Call& c) {
    sessions_.end(ctx.config->mcp, c.session_id, c.session, [this, &ctx, &c](bool ok) {
      if (!ok) return storeUnavailable(ctx, c);
      reply(ctx, c, 200, "");
    });
  }

  void withUpstream(RequestContext& ctx, Call& c, const std::string& server, std::function<void(bool)> next) {
    sessions_.withUpstream(ctx.config->mcp, c.session_id, c.session, server, std::move(next));
  }

  // ---- calls the gateway makes itself ---------------------------------------------

  // Every page of `method` from `server`, items appended to `items`; false if the server
  // failed (a page short: what came is kept). A 404 (the server ended its session) opens
  // a new session once and starts over.
  void fetchAll(RequestContext& ctx, Call& c, const std::string& server, const ListKind& kind, std::shared_ptr<bj::array> items,
                std::string cursor, std::size_t page, bool reopened, std::function<void(bool)> done) {
    const UpstreamSession up = c.session->upstream[server];
    const McpConfig& cfg = ctx.config->mcp;
    bj::object params;
    if (!cursor.empty()) params["cursor"] = cursor;
    bj::object msg{{"jsonrpc", "2.0"}, {"id", "tahua-list"}, {"method", kind.method}, {"params", std::move(params)}};
    sessions_.call(cfg, server, bj::serialize(msg), mcp::Sessions::headersOf(up),
                 [this, &ctx, &c, server, &kind, items, page, reopened, done = std::move(done)](OutboundResponse r) mutable {
                   if (r.status == 404 && !reopened) {
                     c.session->upstream.erase(server);
                     return sessions_.open(ctx.config->mcp, c.session_id, c.session, server, [this, &ctx, &c, server, &kind, items, done = std::move(done)](bool ok) mutable {
                       if (!ok) return done(false);
                       fetchAll(ctx, c, server, kind, items, {}, 0, true, std::move(done));
                     });
                   }
                   auto answer = mcp::answerTo(r, "\"tahua-list\"");
                   const bj::object* result = answer ? json::obj(*answer, "result") : nullptr;
                   const bj::value* got = result ? result->if_contains(kind.field) : nullptr;
                   if (!got || !got->is_array()) {
                     log::warn("an MCP server did not answer a list", {{"server", server}, {"method", kind.method}, {"status", r.status}, {"error", r.error}});
                     return done(false);
                   }
                   for (const auto& item : got->get_array())
                     if (item.is_object()) items->push_back(item);
                   const std::string_view next = json::strOr(*result, "nextCursor");
                   if (next.empty() || page + 1 >= kMaxPages) return done(true);
                   fetchAll(ctx, c, server, kind, items, std::string(next), page + 1, reopened, std::move(done));
                 });
  }

  // ---- lists ------------------------------------------------------------------------

  struct Gather {
    std::size_t pending = 0;
    std::vector<std::string> servers;                // asked, in config order
    std::vector<std::shared_ptr<bj::array>> items;  // per server
    std::vector<bool> ok;
  };

  // Asks every server for `kind` and merges; `after` (instead of the answer) is for the
  // gateway's own use (a resource's server).
  void list(RequestContext& ctx, Call& c, const ListKind& kind, std::function<void()> after) {
    auto g = std::make_shared<Gather>();
    for (const ModelConfig& t : ctx.config->mcp.targets)
      if (c.scope.empty() || t.deployments.front().provider == c.scope) g->servers.push_back(t.deployments.front().provider);
    const std::size_t n = g->servers.size();
    g->pending = n;
    g->ok.assign(n, false);
    for (std::size_t i = 0; i < n; ++i) g->items.push_back(std::make_shared<bj::array>());
    for (std::size_t i = 0; i < n; ++i) {
      const std::string server = g->servers[i];
      auto finish = [this, &ctx, &c, &kind, g, i, after](bool ok) {
        g->ok[i] = ok;
        if (--g->pending == 0) merged(ctx, c, kind, *g, after);
      };
      withUpstream(ctx, c, server, [this, &ctx, &c, server, &kind, g, i, finish](bool ok) mutable {
        if (!ok) return finish(false);
        fetchAll(ctx, c, server, kind, g->items[i], {}, 0, false, finish);
      });
    }
  }

  void merged(RequestContext& ctx, Call& c, const ListKind& kind, Gather& g, const std::function<void()>& after) {
    const McpConfig& cfg = ctx.config->mcp;
    const std::string_view tenant = ctx.principal.tenant ? std::string_view(ctx.principal.tenant->name) : std::string_view();
    const std::string_view key = ctx.principal.key ? std::string_view(ctx.principal.key->name) : std::string_view();
    const bool tools = kind.field == "tools";
    bj::array out;
    for (std::size_t i = 0; i < g.items.size(); ++i) {
      const std::string& server = g.servers[i];
      if (tools && g.ok[i]) catalogs_[server] = {};  // refilled below: a tool that went away goes from it too
      for (auto& item : *g.items[i]) {
        bj::object& o = item.get_object();
        if (kind.named) {
          const std::string_view own = json::strOr(o, "name");
          if (own.empty() || own.find(mcp::kSeparator) != std::string_view::npos) continue;  // not nameable without ambiguity
          const std::string q = mcp::qualified(server, own);
          if (tools) {
            Catalog& cat = catalogs_[server];
            cat.fetched = std::chrono::steady_clock::now();
            ToolEntry entry = toolEntry(server, o);
            const bool pinned_ok = !cfg.pin_tools || pins_.holds(server, own, entry.fingerprint, entry.definition);
            cat.tools[std::string(own)] = std::move(entry);
            if (!pinned_ok) continue;
          }
          if (!mcp::allowed(cfg, tenant, key, q)) continue;
          if (c.scope.empty()) o["name"] = q;  // a server's own path keeps its names
        } else {
          const std::string_view uri = json::strOr(o, "uri", json::strOr(o, "uriTemplate"));
          std::string rule_name = mcp::qualified(server, json::strOr(o, "name", uri));
          const bool ok = mcp::allowed(cfg, tenant, key, rule_name);
          if (!uri.empty()) resource_servers_.try_emplace(std::string(uri), ResourceHome{server, std::move(rule_name)});
          if (!ok) continue;
        }
        out.push_back(std::move(item));
      }
    }
    if (after) return after();
    reply(ctx, c, 200, mcp::resultMessage(c.id, bj::object{{kind.field, std::move(out)}}));
  }

  ToolEntry toolEntry(const std::string& server, const bj::object& tool) {
    ToolEntry e;
    e.definition = tool;
    e.fingerprint = mcp::toolFingerprint(tool);
    if (const bj::value* schema = tool.if_contains("inputSchema")) {
      std::string error;
      e.schema = compileArgumentSchema(*schema, error);
      if (!e.schema) log::warn("an MCP tool's inputSchema cannot be checked: its calls go unchecked", {{"server", server}, {"tool", json::strOr(tool, "name")}, {"error", error}});
    }
    return e;
  }

  // ---- routed calls -----------------------------------------------------------------

  const bj::object* params(Call& c) { return json::obj(c.message, "params"); }

  // The target server of a qualified name the caller may use; null (the caller gets
  // "unknown") otherwise.
  // On a server's own path, `name` is the server's own; it is qualified (`q`) for the
  // rules, the pins and the records.
  const ModelConfig* visibleTarget(RequestContext& ctx, Call& c, std::string_view name, std::string& q, std::string_view& server,
                                   std::string_view& own) {
    q = c.scope.empty() ? std::string(name) : mcp::qualified(c.scope, name);
    if (!c.scope.empty()) {
      if (name.empty()) return nullptr;
      server = c.scope;
      own = name;
    } else if (!mcp::splitQualified(q, server, own)) {
      return nullptr;
    }
    const ModelConfig* target = ctx.config->mcp.targetOf(server);
    if (!target) return nullptr;
    const std::string_view tenant = ctx.principal.tenant ? std::string_view(ctx.principal.tenant->name) : std::string_view();
    const std::string_view key = ctx.principal.key ? std::string_view(ctx.principal.key->name) : std::string_view();
    return mcp::allowed(ctx.config->mcp, tenant, key, q) ? target : nullptr;
  }

  void callTool(RequestContext& ctx, Call& c) {
    const bj::object* p = params(c);
    const std::string_view name = p ? json::strOr(*p, "name") : std::string_view();
    std::string_view server_v, own_v;
    const ModelConfig* target = visibleTarget(ctx, c, name, c.tool, server_v, own_v);
    ctx.record_fields[static_cast<std::size_t>(RecordField::McpTool)] = c.tool;
    if (ctx.config->mcp.audit_arguments && p)
      if (const bj::value* a = p->if_contains("arguments")) {
        c.arguments = bj::serialize(*a);
        ctx.record_fields[static_cast<std::size_t>(RecordField::McpArguments)] = c.arguments;
      }
    auto unknown = [this, &ctx, &c, name = std::string(name)] {
      setOutcome(ctx, c, "unknown_tool");
      reply(ctx, c, 200, mcp::errorMessage(c.id, mcp::kInvalidParams, "Unknown tool: " + name));
    };
    if (!target) return unknown();
    const std::string server(server_v), own(own_v);
    withUpstream(ctx, c, server, [this, &ctx, &c, target, server, own, unknown](bool ok) {
      if (!ok) return serverDown(ctx, c, server);
      withCatalog(ctx, c, server, [this, &ctx, &c, target, server, own, unknown](bool ok) {
        auto& tools = catalogs_[server].tools;
        auto it = tools.find(own);
        if (!ok && it == tools.end()) return serverDown(ctx, c, server);
        if (it == tools.end() || (ctx.config->mcp.pin_tools && !pins_.holds(server, own, it->second.fingerprint, it->second.definition)))
          return unknown();
        c.known_tool = true;
        if (ctx.config->mcp.validate_arguments && it->second.schema) {
          const bj::object* p = params(c);
          const bj::value* args = p ? p->if_contains("arguments") : nullptr;
          const bj::value empty = bj::object();
          const std::string problem = checkArguments(*it->second.schema, args ? *args : empty);
          if (!problem.empty()) {
            setOutcome(ctx, c, "invalid_arguments");
            return reply(ctx, c, 200, mcp::errorMessage(c.id, mcp::kInvalidParams, "Invalid arguments for tool " + c.tool + ": " + problem));
          }
        }
        route(ctx, c, *target, server, "name", own);
      });
    });
  }

  void getPrompt(RequestContext& ctx, Call& c) {
    const bj::object* p = params(c);
    const std::string_view name = p ? json::strOr(*p, "name") : std::string_view();
    std::string q;
    std::string_view server, own;
    const ModelConfig* target = visibleTarget(ctx, c, name, q, server, own);
    if (!target) return reply(ctx, c, 200, mcp::errorMessage(c.id, mcp::kInvalidParams, "Unknown prompt: " + std::string(name)));
    const std::string s(server), o(own);
    withUpstream(ctx, c, s, [this, &ctx, &c, target, s, o](bool ok) {
      if (!ok) return serverDown(ctx, c, s);
      route(ctx, c, *target, s, "name", o);
    });
  }

  // A resource's server is the one that listed its URI (the first in config order when
  // several did); an URI no server listed is looked for by listing once. The caller
  // must be allowed the name the resource was listed under (the map is the worker's,
  // filled by every caller's lists). On a server's own path an URI it did not list (one
  // made from a template) goes to it, checked under the URI.
  void resourceCall(RequestContext& ctx, Call& c) {
    const bj::object* p = params(c);
    withResource(ctx, c, std::string(p ? json::strOr(*p, "uri") : std::string_view()), kLists[2],
                 [this, &ctx, &c](const ModelConfig& target, const std::string& server) { toServer(ctx, c, target, server); });
  }

  // completion/complete: to the server of the prompt or resource template it is about.
  void complete(RequestContext& ctx, Call& c) {
    bj::value* p = c.message.if_contains("params");
    bj::value* ref = p && p->is_object() ? p->get_object().if_contains("ref") : nullptr;
    if (!ref || !ref->is_object()) return reply(ctx, c, 200, mcp::errorMessage(c.id, mcp::kInvalidParams, "Invalid params: ref is required."));
    bj::object& r = ref->get_object();
    const std::string_view type = json::strOr(r, "type");
    if (type == "ref/resource")
      return withResource(ctx, c, std::string(json::strOr(r, "uri")), kLists[3],
                          [this, &ctx, &c](const ModelConfig& target, const std::string& server) { toServer(ctx, c, target, server); });
    if (type != "ref/prompt") return reply(ctx, c, 200, mcp::errorMessage(c.id, mcp::kInvalidParams, "Invalid params: ref.type is ref/prompt or ref/resource."));
    const std::string name(json::strOr(r, "name"));
    std::string q;
    std::string_view server, own;
    const ModelConfig* target = visibleTarget(ctx, c, name, q, server, own);
    if (!target) return reply(ctx, c, 200, mcp::errorMessage(c.id, mcp::kInvalidParams, "Unknown prompt: " + name));
    r["name"] = own;  // the server's own name
    toServer(ctx, c, *target, std::string(server));
  }

  // Finds the server of `uri` (listed under `kind`) that the caller may use, then `next`.
  void withResource(RequestContext& ctx, Call& c, std::string uri, const ListKind& kind,
                    std::function<void(const ModelConfig&, const std::string&)> next) {
    auto go = [this, &ctx, &c, uri, next = std::move(next)] {
      const McpConfig& cfg = ctx.config->mcp;
      auto it = resource_servers_.find(uri);
      std::string server, rule_name;
      if (it != resource_servers_.end() && (c.scope.empty() || it->second.server == c.scope)) {
        server = it->second.server;
        rule_name = it->second.rule_name;
      } else if (!c.scope.empty()) {
        server = c.scope;
        rule_name = mcp::qualified(c.scope, uri);
      }
      const std::string_view tenant = ctx.principal.tenant ? std::string_view(ctx.principal.tenant->name) : std::string_view();
      const std::string_view key = ctx.principal.key ? std::string_view(ctx.principal.key->name) : std::string_view();
      const ModelConfig* target = server.empty() || !mcp::allowed(cfg, tenant, key, rule_name) ? nullptr : cfg.targetOf(server);
      if (!target) return reply(ctx, c, 200, mcp::errorMessage(c.id, -32002, "Resource not found: " + uri));
      next(*target, server);
    };
    if (!c.scope.empty() || resource_servers_.contains(uri)) return go();
    if (resource_servers_.size() > 100'000) resource_servers_.clear();
    list(ctx, c, kind, std::move(go));
  }

  // On a server's own path: a request the gateway does not look into goes to the server.
  void toScope(RequestContext& ctx, Call& c) { toServer(ctx, c, *ctx.config->mcp.targetOf(c.scope), c.scope); }

  void toServer(RequestContext& ctx, Call& c, const ModelConfig& target, const std::string& server) {
    withUpstream(ctx, c, server, [this, &ctx, &c, &target, server](bool ok) {
      if (!ok) return serverDown(ctx, c, server);
      route(ctx, c, target, server, {}, {});
    });
  }

  // A client's notification, or its answer to a server's request (sampling,
  // elicitation, roots). On a server's own path it goes to the server in the session's
  // upstream session. On /mcp it is answered 202 and dropped: the gateway could not tell
  // which server it is for (and declares no client capabilities there, so servers ask
  // nothing). The client's `initialized` is the gateway's to send upstream, and was.
  void clientMessage(RequestContext& ctx, Call& c) {
    if (c.scope.empty() || c.session_id.empty() || c.method == "notifications/initialized") return accepted(ctx, c);
    withSession(ctx, c, [this, &ctx, &c] { toScope(ctx, c); });
  }

  // GET /mcp/{server}: the server's own stream of messages for this session, relayed as
  // it comes (a resumed stream's Last-Event-ID goes with it).
  void openStream(RequestContext& ctx, Call& c) {
    const std::string server = c.scope;
    const ModelConfig* target = ctx.config->mcp.targetOf(server);
    withUpstream(ctx, c, server, [this, &ctx, &c, target, server](bool ok) {
      if (!ok) return serverDown(ctx, c, server);
      ctx.body.clear();
      c.server = server;
      c.upstream = c.session->upstream[server];
      c.stream_opening = true;
      ++c.session->streams_opening;
      ctx.facts = RequestFacts{};
      ctx.facts.model = target->name;
      ctx.model = target;
      ctx.requested_model = target;
      c.done(FilterStatus::Continue);
    });
  }

  void serverDown(RequestContext& ctx, Call& c, const std::string& server) {
    if (!c.tool.empty()) setOutcome(ctx, c, "server_unavailable");
    reply(ctx, c, 502, mcp::errorMessage(c.id, mcp::kInternalError, "The MCP server \"" + server + "\" did not answer."));
  }

  // Keeps the server's tool list fresh enough to check a call against (kCatalogFresh).
  void withCatalog(RequestContext& ctx, Call& c, const std::string& server, std::function<void(bool)> next) {
    auto it = catalogs_.find(server);
    if (it != catalogs_.end() && std::chrono::steady_clock::now() - it->second.fetched < kCatalogFresh) return next(true);
    auto items = std::make_shared<bj::array>();
    fetchAll(ctx, c, server, kLists[0], items, {}, 0, false, [this, server, items, next = std::move(next)](bool ok) {
      if (ok) {
        Catalog cat;
        cat.fetched = std::chrono::steady_clock::now();
        for (const auto& item : *items) {
          const std::string_view own = json::strOr(item.get_object(), "name");
          if (!own.empty()) cat.tools[std::string(own)] = toolEntry(server, item.get_object());
        }
        catalogs_[server] = std::move(cat);
      }
      next(ok);
    });
  }

  // The request goes on to `server` through the data path: its own name for the item
  // (`field` of params, when given), its session in a header (onUpstreamRequest). The
  // limits see the qualified name as the model asked for (a RateLimitPolicy may match
  // it), the balancer the target. While the session's GET stream is being opened
  // upstream, it waits for it (Session::streams_opening).
  void route(RequestContext& ctx, Call& c, const ModelConfig& target, const std::string& server, std::string_view field, std::string_view value) {
    if (bj::value* p = c.message.if_contains("params"); p && p->is_object() && !field.empty()) p->get_object()[field] = value;
    ctx.body = bj::serialize(c.message);
    c.server = server;
    c.upstream = c.session->upstream[server];
    ctx.facts = RequestFacts{};
    ctx.facts.model = c.tool.empty() ? target.name : c.tool;
    ctx.model = &target;
    ctx.requested_model = &target;
    if (c.session->streams_opening > 0) return c.session->after_streams.push_back([&c] { c.done(FilterStatus::Continue); });
    c.done(FilterStatus::Continue);
  }

  // A GET stream's head came from the server (it is open there), or none will: the calls
  // held for it go on.
  void streamSettled(Call& c) {
    if (!c.stream_opening) return;
    c.stream_opening = false;
    if (--c.session->streams_opening > 0) return;
    for (auto& go : std::exchange(c.session->after_streams, {})) go();
  }

  WorkerMetrics& metrics_;
  // Per worker, so without locks; caches of what the store and the servers hold.
  mcp::Sessions sessions_;
  mcp::ToolPins pins_;
  std::map<std::string, Catalog, std::less<>> catalogs_;
  struct ResourceHome {
    std::string server;
    std::string rule_name;  // what access rules match: "<server>__<its name, else its uri>"
  };
  std::unordered_map<std::string, ResourceHome> resource_servers_;  // uri or template -> where
};

}  // namespace

std::unique_ptr<Filter> makeMcpFilter(StateStore& store, WorkerServices& services, WorkerMetrics& metrics) {
  return std::make_unique<McpFilter>(store, services, metrics);
}

}  // namespace tahua
