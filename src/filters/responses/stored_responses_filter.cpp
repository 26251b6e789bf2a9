#include "filters/responses/stored_responses_filter.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <map>

#include "core/json_read.h"
#include "core/log.h"
#include "filters/responses/response_records.h"
#include "http/request_inspect.h"
#include "providers/secret_scrubber.h"
#include "sse/sse_parser.h"
#include "store/state_store.h"
#include "telemetry/metrics.h"
#include "translate/response_ids.h"

namespace tahua {
namespace {

namespace bj = boost::json;
using stored_responses::Record;

// The lookups of one request (allocated only by requests that need them).
struct Lookup {
  bj::object request;
  stored_responses::Wanted wanted;
  std::map<std::string, Record, std::less<>> records;
  std::size_t pending = 0;
  bool unavailable = false;
  bool second_round = false;
};

// Watches a translated Responses stream for its last event, which holds the response.
struct FinalEventSink final : SseSink {
  std::string response_event;  // the data of response.completed / response.incomplete
  void onEvent(const SseEvent& ev) override {
    if (ev.event == "response.completed" || ev.event == "response.incomplete") response_event.assign(ev.data);
  }
};

struct StoredResponsesState {
  std::string scope;  // set once the request needs the store
  std::unique_ptr<Lookup> lookup;
  bool deciding = false;
  bool answered = false;
  FilterStatus answer = FilterStatus::Continue;
  // What the expansion found, for the record of the new response.
  std::size_t prefix_items = 0;
  std::vector<std::string> context;
  std::string previous_id;
  // Capture. The record is written before the answer's end reaches the client
  // (onAnswerEnd): a client that continues at once, on any replica, finds it.
  bool capturing = false;
  bool end_held = false;  // the piece with the final event was held for the write
  bool echo = false;  // previous_response_id is put back into the answer objects
  std::unique_ptr<SseParser> parser;
  FinalEventSink sink;
  std::string body;  // a whole (non-streamed) answer
  std::string rewritten;  // a piece with previous_response_id echoed
};

// The translator's answer objects say "previous_response_id":null (the upstream got the
// whole conversation instead); the client sees the id it sent, as OpenAI's answers show.
bool echoPrevious(const StoredResponsesState& st, std::string_view in, std::string& out) {
  static constexpr std::string_view kNull = "\"previous_response_id\":null";
  std::size_t at = in.find(kNull);
  if (at == std::string_view::npos) return false;
  out.clear();
  std::size_t from = 0;
  while (at != std::string_view::npos) {
    out.append(in.substr(from, at - from)).append("\"previous_response_id\":\"").append(st.previous_id).append("\"");
    from = at + kNull.size();
    at = in.find(kNull, from);
  }
  out.append(in.substr(from));
  return true;
}

// A provider whose `apis` list names `responses` answers /v1/responses itself (passed
// through): its ids are the provider's and so is its state. Every other answer was made by
// the translator, with tahua's ids.
bool translated(const RequestContext& ctx) { return ctx.provider && !ctx.provider->serves(ProviderApi::Responses); }

class StoredResponsesFilter final : public FilterWithState<StoredResponsesState> {
 public:
  StoredResponsesFilter(StateStore& store, WorkerMetrics& metrics) : store_(store), metrics_(metrics) {}
  std::string_view name() const override { return "stored_responses"; }
  bool wantsResponseData() const override { return true; }
  bool holdsAnswerEnds() const override { return true; }

  FilterStatus onRequestHeaders(RequestContext& ctx) override {
    if (ctx.endpoint != Endpoint::StoredResponse) return FilterStatus::Continue;
    return serveStored(ctx);
  }

  FilterStatus onRequestBody(RequestContext& ctx) override {
    if (ctx.endpoint != Endpoint::Responses) return FilterStatus::Continue;
    const std::string& body = ctx.body;
    // Only a request that refers to earlier state is parsed here.
    if (body.find("previous_response_id") == std::string::npos && body.find("item_reference") == std::string::npos)
      return FilterStatus::Continue;
    if (jsonDeeperThan(body, ctx.config->server.max_json_depth)) return FilterStatus::Continue;  // the router says why
    boost::system::error_code ec;
    bj::value v = readJson(body, ec);
    if (ec || !v.is_object()) return FilterStatus::Continue;  // the router says why
    auto lookup = std::make_unique<Lookup>();
    lookup->wanted = stored_responses::wantedBy(v.get_object());
    if (lookup->wanted.previous.empty() && lookup->wanted.items.empty()) return FilterStatus::Continue;
    lookup->request = std::move(v.get_object());
    StoredResponsesState& st = state(ctx);
    st.scope = scopeOf(ctx);
    st.lookup = std::move(lookup);
    std::vector<std::string> keys = st.lookup->wanted.items;
    if (!st.lookup->wanted.previous.empty()) keys.push_back(st.lookup->wanted.previous);
    st.deciding = true;
    fetch(ctx, std::move(keys));
    st.deciding = false;
    return st.answered ? st.answer : FilterStatus::Pause;
  }

  void onResponseHeaders(RequestContext& ctx) override {
    StoredResponsesState& st = state(ctx);
    st.capturing = ctx.endpoint == Endpoint::Responses && ctx.config->responses.store && !ctx.error && !ctx.local_reply &&
                   ctx.status >= 200 && ctx.status < 300 && translated(ctx);
    if (st.capturing && ctx.streaming) st.parser = std::make_unique<SseParser>(ctx.config->server.max_stream_event_bytes);
    st.echo = !st.previous_id.empty() && ctx.endpoint == Endpoint::Responses && !ctx.error && !ctx.local_reply &&
              ctx.status >= 200 && ctx.status < 300 && translated(ctx);
  }

  void onResponseData(RequestContext& ctx, ResponseData& data) override {
    StoredResponsesState& st = state(ctx);
    if (st.echo && !data.aborted() && echoPrevious(st, data.bytes(), st.rewritten)) data.replace(st.rewritten);
    if (!st.capturing || !st.parser) return;
    if (data.aborted() || data.failed()) {
      st.capturing = false;  // a stream that did not end normally is not kept
      return;
    }
    if (!st.parser->feed(data.bytes(), st.sink)) st.capturing = false;
    else if (!st.end_held && !st.sink.response_event.empty()) {
      st.end_held = true;  // the client must not see response.completed before the write
      data.holdEnd();
    }
  }

  void onResponseBody(RequestContext& ctx, std::string& body) override {
    StoredResponsesState& st = state(ctx);
    if (st.echo && echoPrevious(st, body, st.rewritten)) body.swap(st.rewritten);
    if (st.capturing) st.body = body;
  }

  // Held at most the store's command timeout (its answer always comes): a write that
  // fails lets the answer go on, counted and logged, and the response is not kept.
  FilterStatus onAnswerEnd(RequestContext& ctx) override {
    StoredResponsesState& st = state(ctx);
    if (!st.capturing) return FilterStatus::Continue;
    st.capturing = false;
    if (ctx.error || ctx.status < 200 || ctx.status >= 300) return FilterStatus::Continue;
    st.answered = false;
    st.deciding = true;
    const bool writing = keep(ctx, st);
    st.deciding = false;
    return !writing || st.answered ? FilterStatus::Continue : FilterStatus::Pause;
  }

 private:
  std::string scopeOf(const RequestContext& ctx) const {
    const std::string_view tenant = ctx.principal.tenant ? std::string_view(ctx.principal.tenant->name) : std::string_view{};
    const std::string_view key =
        ctx.config->responses.per_key && ctx.principal.key ? std::string_view(ctx.principal.key->name) : std::string_view{};
    return stored_responses::scopeOf(tenant, key);
  }

  void count(std::string_view op, std::string_view result) {
    auto it = metrics_.stored_responses.find(std::pair(op, result));
    if (it == metrics_.stored_responses.end())
      it = metrics_.stored_responses.emplace(std::pair(std::string(op), std::string(result)), 0).first;
    ++it->second;
  }

  // A record's lookup. An id made in the last seconds may not have reached this
  // replica's id filter yet (the writer's notification is on its way): "missing" must
  // then come from the store (an agent continues a conversation at once, on any replica).
  static constexpr long long kYoungSeconds = 10;
  void get(const std::string& record_key, std::string_view response_key, std::function<void(StateStore::ValueResult)> done) {
    if (responseKeyIsRecent(response_key, kYoungSeconds)) store_.getFreshValue(record_key, std::move(done));
    else store_.getValue(record_key, std::move(done));
  }

  // --- Expansion ---------------------------------------------------------------------

  // Looks up `keys` (response keys); `fetched` runs once every answer is in.
  void fetch(RequestContext& ctx, std::vector<std::string> keys) {
    StoredResponsesState& st = state(ctx);
    Lookup& l = *st.lookup;
    l.pending = keys.size() + 1;  // +1: held until every call is made (a store may answer at once)
    for (const auto& k : keys) {
      get(stored_responses::recordKey(st.scope, k), k, [this, &ctx, k](StateStore::ValueResult r) {
        Lookup& lk = *state(ctx).lookup;
        if (r.status == StateStore::ValueResult::Status::Unavailable) {
          lk.unavailable = true;
        } else if (r.status == StateStore::ValueResult::Status::Found) {
          if (auto rec = stored_responses::parseRecord(r.value)) lk.records.emplace(k, std::move(*rec));
          else log::warn("stored response unreadable: treated as missing", {{"response", responseIdFor(k)}});
        }
        if (--lk.pending == 0) fetched(ctx);
      });
    }
    if (--l.pending == 0) fetched(ctx);
  }

  void fetched(RequestContext& ctx) {
    StoredResponsesState& st = state(ctx);
    Lookup& l = *st.lookup;
    if (l.unavailable) {
      count("expand", "unavailable");
      Error e{ErrorKind::StoreUnavailable, "Stored responses cannot be read now (the state store is unavailable); retry shortly."};
      e.retry_after_seconds = 1;
      ctx.fail(std::move(e));
      return finish(ctx, FilterStatus::Stop);
    }
    // Second round: the earlier turns of previous_response_id's conversation.
    if (!l.second_round && !l.wanted.previous.empty()) {
      l.second_round = true;
      if (auto prev = l.records.find(l.wanted.previous); prev != l.records.end()) {
        std::vector<std::string> more;
        for (const auto& k : prev->second.context)
          if (!l.records.contains(k)) more.push_back(k);
        if (prev->second.context.size() + 1 > ctx.config->responses.max_turns) more.clear();  // expand() refuses it
        if (!more.empty()) return fetch(ctx, std::move(more));
      }
    }
    auto expanded = stored_responses::expand(l.request, l.wanted, l.records, ctx.config->responses.max_turns);
    if (auto* err = std::get_if<Error>(&expanded)) {
      count("expand", "missing");
      ctx.fail(std::move(*err));
      return finish(ctx, FilterStatus::Stop);
    }
    count("expand", "ok");
    auto& e = std::get<stored_responses::Expansion>(expanded);
    st.prefix_items = e.prefix_items;
    st.context = std::move(e.context);
    st.previous_id = l.wanted.previous_id;
    ctx.body = bj::serialize(l.request);
    st.lookup.reset();
    finish(ctx, FilterStatus::Continue);
  }

  void finish(RequestContext& ctx, FilterStatus status) {
    StoredResponsesState& st = state(ctx);
    if (st.deciding) {
      st.answered = true;
      st.answer = status;
    } else {
      ctx.resumer->resume(status);
    }
  }

  // --- GET / DELETE ------------------------------------------------------------------

  FilterStatus serveStored(RequestContext& ctx) {
    StoredResponsesState& st = state(ctx);
    std::string_view rest = ctx.path.substr(std::string_view("/v1/responses/").size());
    bool items = false;
    if (auto slash = rest.find('/'); slash != std::string_view::npos) {
      if (rest.substr(slash) != "/input_items" || ctx.method == "DELETE") {
        ctx.fail(Error{ErrorKind::UnknownPath, "Unknown request URL: " + std::string(ctx.method) + " " + std::string(ctx.path) + "."});
        return FilterStatus::Stop;
      }
      items = true;
      rest = rest.substr(0, slash);
    }
    const std::string id(rest);
    const std::string key(responseKeyOf(id));
    const bool erase = ctx.method == "DELETE";
    const std::string_view op = erase ? "delete" : "get";
    if (key.empty()) {
      count(op, "missing");
      ctx.fail(notFound(id));
      return FilterStatus::Stop;
    }
    st.scope = scopeOf(ctx);
    st.deciding = true;
    get(stored_responses::recordKey(st.scope, key), key, [this, &ctx, id, key, items, erase, op](StateStore::ValueResult r) {
      if (r.status == StateStore::ValueResult::Status::Unavailable) {
        count(op, "unavailable");
        Error e{ErrorKind::StoreUnavailable, "Stored responses cannot be read now (the state store is unavailable); retry shortly."};
        e.retry_after_seconds = 1;
        ctx.fail(std::move(e));
        return finish(ctx, FilterStatus::Stop);
      }
      std::optional<Record> rec;
      if (r.status == StateStore::ValueResult::Status::Found) rec = stored_responses::parseRecord(r.value);
      if (!rec) {
        count(op, "missing");
        ctx.fail(notFound(id));
        return finish(ctx, FilterStatus::Stop);
      }
      if (erase) return eraseStored(ctx, id, key);
      count(op, "ok");
      if (!items) {
        ctx.local_reply = LocalReply{200, bj::serialize(rec->response), "application/json"};
        return finish(ctx, FilterStatus::Stop);
      }
      auto page = stored_responses::inputItemsPage(*rec, ctx.query);
      if (auto* err = std::get_if<Error>(&page)) ctx.fail(std::move(*err));
      else ctx.local_reply = LocalReply{200, std::move(std::get<std::string>(page)), "application/json"};
      finish(ctx, FilterStatus::Stop);
    });
    st.deciding = false;
    return st.answered ? st.answer : FilterStatus::Pause;
  }

  void eraseStored(RequestContext& ctx, const std::string& id, const std::string& key) {
    StoredResponsesState& st = state(ctx);
    const std::string group = stored_responses::groupOf(st.scope);
    store_.eraseGroupedValue(stored_responses::recordKey(st.scope, key), group, [this, &ctx, id](std::optional<std::string> error) {
      if (error) {
        count("delete", "unavailable");
        Error e{ErrorKind::StoreUnavailable, "The stored response cannot be deleted now (the state store is unavailable); retry shortly."};
        e.retry_after_seconds = 1;
        ctx.fail(std::move(e));
        return finish(ctx, FilterStatus::Stop);
      }
      count("delete", "ok");
      ctx.local_reply = LocalReply{200, bj::serialize(bj::object{{"id", id}, {"object", "response"}, {"deleted", true}}), "application/json"};
      finish(ctx, FilterStatus::Stop);
    });
  }

  static Error notFound(const std::string& id) {
    return Error{ErrorKind::ResponseNotFound, "Response with id '" + id + "' not found."};
  }

  // --- Capture -----------------------------------------------------------------------

  // Starts the record's write; false when nothing is written (finish() is not called).
  bool keep(RequestContext& ctx, StoredResponsesState& st) {
    const ResponsesConfig& cfg = ctx.config->responses;
    boost::system::error_code ec;
    bj::value request = readJson(ctx.body, ec);
    if (ec || !request.is_object()) return false;
    if (const bj::value* s = request.get_object().if_contains("store"); s && s->is_bool() && !s->get_bool()) return false;
    std::string text = ctx.streaming ? std::move(st.sink.response_event) : std::move(st.body);
    bj::value answer = readJson(text, ec);
    if (ec || !answer.is_object()) {
      count("store", "error");
      return false;
    }
    bj::object response;
    if (ctx.streaming) {
      bj::value* r = answer.get_object().if_contains("response");
      if (!r || !r->is_object()) {
        count("store", "error");
        return false;
      }
      response = std::move(r->get_object());
    } else {
      response = std::move(answer.get_object());
    }
    auto rec = stored_responses::makeRecord(std::move(response), request.get_object(), st.prefix_items, std::move(st.context),
                                            st.previous_id);
    if (!rec) {
      count("store", "error");
      return false;
    }
    std::string value = stored_responses::serializeRecord(*rec);
    SecretScrubber(*ctx.provider).scrubWhole(value);  // as the client's copy was
    if (value.size() > StateStore::kMaxValueBytes) {
      count("store", "too_large");
      log::warn("stored response not kept: larger than a stored value may be (1 MiB)",
                {{"request_id", ctx.request_id}, {"bytes", value.size()}});
      return false;
    }
    if (st.scope.empty()) st.scope = scopeOf(ctx);
    const std::string id(rec->response.at("id").as_string());
    const std::string key(responseKeyOf(id));
    const std::string group = stored_responses::groupOf(st.scope);
    // The request waits for the answer (it is paused), so the callback may use it.
    store_.putGroupedValue(stored_responses::recordKey(st.scope, key), std::move(value), cfg.ttl,
                           StateStore::ValueGroup{group, cfg.max_bytes_per_tenant},
                           [this, &ctx, id](std::optional<std::string> error) {
                             if (!error) {
                               count("store", "ok");
                             } else {
                               count("store", "unavailable");
                               log::warn("stored response not kept", {{"response", id}, {"request_id", ctx.request_id}, {"error", *error}});
                             }
                             finish(ctx, FilterStatus::Continue);
                           });
    return true;
  }

  StateStore& store_;
  WorkerMetrics& metrics_;
};

}  // namespace

std::unique_ptr<Filter> makeStoredResponsesFilter(StateStore& store, WorkerMetrics& metrics) {
  return std::make_unique<StoredResponsesFilter>(store, metrics);
}

}  // namespace tahua
