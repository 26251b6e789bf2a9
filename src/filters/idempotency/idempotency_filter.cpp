#include "filters/idempotency/idempotency_filter.h"

#include "request/upload.h"

#include "core/sha256.h"
#include "filters/answer_capture.h"
#include "store/state_store.h"

namespace tahua {
namespace {

struct IdempotencyState {
  bool active = false;   // this request holds its key and will store its answer
  bool replayed = false;  // answered from a stored answer
  std::string store_key;
  std::string lock_name;
  std::string owner;
  std::string fingerprint;
  AnswerCapture captured;  // the answer as the client got it
  std::unique_ptr<TimerHandle> renew;
  bool deciding = false;  // inside the store calls of onRequestBody
  bool answered = false;
  FilterStatus answer = FilterStatus::Continue;
};

bool validKey(std::string_view k) {
  if (k.empty() || k.size() > 256) return false;
  for (char c : k)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}

class IdempotencyFilter final : public FilterWithState<IdempotencyState> {
 public:
  IdempotencyFilter(StateStore& store, WorkerServices& services) : store_(store), services_(services) {}
  std::string_view name() const override { return "idempotency"; }
  bool wantsResponseData() const override { return true; }

  FilterStatus onRequestBody(RequestContext& ctx) override {
    // Not for what is not answered by one replayable body: a WebSocket session, speech
    // audio (kept answers are text), reads of files and batches (a GET repeats itself),
    // and MCP (its sessions are its own: a message is answered once, in its session).
    if (ctx.endpoint == Endpoint::None || ctx.endpoint == Endpoint::Mcp || ctx.endpoint == Endpoint::Models || ctx.endpoint == Endpoint::CountTokens ||
        ctx.endpoint == Endpoint::Realtime || ctx.endpoint == Endpoint::AudioSpeech || (fileEndpoint(ctx.endpoint) && ctx.method != "POST"))
      return FilterStatus::Continue;
    const std::string_view key = ctx.headers ? ctx.headers->get("idempotency-key") : std::string_view{};
    if (key.empty()) return FilterStatus::Continue;
    if (!validKey(key)) {
      ctx.fail(Error{ErrorKind::InvalidRequest, "Idempotency-Key must be 1 to 256 printable characters without spaces."});
      return FilterStatus::Stop;
    }
    IdempotencyState& st = state(ctx);
    // Scoped to the caller; hashed, so any key text makes a short, safe store key.
    const std::string tenant = ctx.principal.tenant ? ctx.principal.tenant->name : std::string();
    std::string scope = tenant;
    scope += '\0';
    if (ctx.principal.key) scope += ctx.principal.key->name;
    scope += '\0';
    scope += key;
    st.store_key = "tahua:{t:" + tenant + "}:idem:" + toHex(sha256(scope));
    st.lock_name = st.store_key + ":lock";
    st.owner = ctx.request_id;
    std::string request(ctx.method);
    request += ' ';
    request += ctx.path;
    request += '\n';
    request += ctx.body;
    // An upload: its fields (the body above) and each file part's name, file name and
    // size (not its content: hashing 50 MB again per request is not worth it).
    if (ctx.upload)
      for (const FormPart& p : ctx.upload->parts)
        if (p.file()) request.append("\n").append(p.name).append("\n").append(p.filename).append("\n").append(std::to_string(p.data_end - p.data_begin));
    st.fingerprint = toHex(sha256(request));

    st.deciding = true;
    store_.getIdempotent(st.store_key, [this, &ctx](std::optional<StateStore::Idempotent> rec) { found(ctx, std::move(rec)); });
    st.deciding = false;
    return st.answered ? st.answer : FilterStatus::Pause;
  }

  void onResponseHeaders(RequestContext& ctx) override {
    IdempotencyState& st = state(ctx);
    if (st.replayed && ctx.response_headers) ctx.response_headers->emplace_back("x-idempotent-replayed", "true");
  }

  void onResponseData(RequestContext& ctx, ResponseData& data) override {
    IdempotencyState& st = state(ctx);
    if (st.active) st.captured.piece(data, ctx.config->idempotency.max_body_bytes);
  }

  void onResponseBody(RequestContext& ctx, std::string& body) override {
    IdempotencyState& st = state(ctx);
    if (st.active) st.captured.body(body, ctx.config->idempotency.max_body_bytes);
  }

  void onComplete(RequestContext& ctx) override {
    IdempotencyState& st = state(ctx);
    if (!st.active) return;
    st.renew.reset();
    const IdempotencyConfig& cfg = ctx.config->idempotency;
    if (st.captured.complete() && !ctx.error && ctx.status >= 200 && ctx.status < 300) {
      if (st.captured.tooLarge()) {
        // Done, and billed, but too large to keep: a retry must not run it again.
        Error e{ErrorKind::IdempotencyNotKept,
                "The request with this Idempotency-Key was answered, but its answer was too large to keep."};
        store_.putIdempotent(st.store_key, {st.fingerprint, e.httpStatus(), "application/json", ctx.errorBody(e)}, cfg.ttl);
      } else {
        store_.putIdempotent(st.store_key,
                             {st.fingerprint, ctx.status, ctx.streaming ? "text/event-stream" : "application/json",
                              st.captured.take()},
                             cfg.ttl);
      }
    }
    // A failed attempt frees the key: the client's retry runs (nothing was billed twice).
    store_.unlock(st.lock_name, st.owner);
    st.active = false;
  }

 private:
  // The stored answer, if any; else take the key.
  void found(RequestContext& ctx, std::optional<StateStore::Idempotent> rec) {
    IdempotencyState& st = state(ctx);
    if (rec && rec->status != 0) {
      if (rec->fingerprint != st.fingerprint) {
        ctx.fail(Error{ErrorKind::IdempotencyKeyReused,
                       "This Idempotency-Key was used for a different request; use a new key for a new request."});
        return finish(ctx, FilterStatus::Stop);
      }
      st.replayed = true;
      ctx.local_reply = LocalReply{rec->status, std::move(rec->body), std::move(rec->content_type), true};
      return finish(ctx, FilterStatus::Stop);
    }
    store_.tryLock(st.lock_name, st.owner, ctx.config->idempotency.lock_ttl, [this, &ctx](bool held) { locked(ctx, held); });
  }

  void locked(RequestContext& ctx, bool held) {
    IdempotencyState& st = state(ctx);
    if (!held) {
      Error e{ErrorKind::IdempotencyInProgress,
              "A request with this Idempotency-Key is being answered; retry shortly to get its answer."};
      e.retry_after_seconds = 1;
      ctx.fail(std::move(e));
      return finish(ctx, FilterStatus::Stop);
    }
    st.active = true;
    scheduleRenewal(ctx);
    finish(ctx, FilterStatus::Continue);
  }

  // A long stream keeps its key: renewed every third of the lock's TTL until onComplete.
  void scheduleRenewal(RequestContext& ctx) {
    IdempotencyState& st = state(ctx);
    const Millis ttl = ctx.config->idempotency.lock_ttl;
    st.renew = services_.runAfter(Millis(std::max<std::int64_t>(ttl.count() / 3, 1)), [this, &ctx, ttl] {
      IdempotencyState& s = state(ctx);
      store_.renewLock(s.lock_name, s.owner, ttl, [](bool) {});
      scheduleRenewal(ctx);
    });
  }

  void finish(RequestContext& ctx, FilterStatus status) {
    IdempotencyState& st = state(ctx);
    if (st.deciding) {
      st.answered = true;
      st.answer = status;
    } else {
      ctx.resumer->resume(status);
    }
  }

  StateStore& store_;
  WorkerServices& services_;
};

}  // namespace

std::unique_ptr<Filter> makeIdempotencyFilter(StateStore& store, WorkerServices& services) {
  return std::make_unique<IdempotencyFilter>(store, services);
}

}  // namespace tahua
