// The request pipeline. A request flows through an ordered chain of filters, phase by
// phase (see docs/life-of-a-request.md and docs/writing-a-filter.md):
//
//   onRequestHeaders -> onRequestBody -> onUpstreamSelect   request phases: may Stop or Pause
//   -> onUpstreamRequest -> [upstream attempt] (-> onAttemptFailed -> onReselect -> onUpstreamRequest)*
//   [every attempt failed -> onUpstreamsFailed: a kept answer instead]
//   [a whole non-streamed answer a filter judges -> onAnswer: may refuse it for the next fallback model]
//   -> onUpstreamHeaders (read only) -> onResponseHeaders -> onResponseData* | onResponseBody
//                                                           may rewrite what the client gets
//   [before the answer's end is released -> onAnswerEnd: may Pause (a write the client relies on)]
//   -> onComplete                                              always, once, error or not
//
// A filter object is made per worker from the config snapshot and serves every request
// of that worker (per-worker state needs no locks). What it keeps per request lives in a
// State of its own (FilterWithState<State>), laid out by the chain in one block the
// session owns: no field in RequestContext, no allocation per request.
//
// Request phases return Continue, Stop (ctx.error or ctx.local_reply says how to answer)
// or Pause: the filter started something asynchronous (a queue, a store lookup) and
// will call ctx.resumer->resume(status) exactly once, on the worker's thread, within a
// bounded time of its own (it owns the timeout). The chain then goes on with the next
// filter. A filter that answers at once costs the session no coroutine frame.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <string_view>
#include <vector>

#include "request/request_context.h"

namespace tahua {

enum class FilterStatus {
  Continue,  // go on with the next filter / phase
  Stop,      // the filter set ctx.error or ctx.local_reply; answer now, skip the upstream
  Pause,     // the filter will call ctx.resumer->resume(...) once; nothing runs until then
};

// Lets a paused request go on. The session gives one to every request (ctx.resumer).
class Resumer {
 public:
  // Continue, or Stop with ctx.error / ctx.local_reply set. On the worker's thread only.
  virtual void resume(FilterStatus status) = 0;

 protected:
  ~Resumer() = default;
};

// A piece of a response stream on its way to the client, after the provider adapter's
// translation, in the client's API format. Filters see it in chain order; each may leave
// it as it is, replace it (what later filters and the client see), or end the stream.
class ResponseData {
 public:
  ResponseData(std::string_view bytes, bool last) : bytes_(bytes), last_(last) {}

  std::string_view bytes() const { return bytes_; }
  // The upstream's last piece (or the stream is being ended by the gateway: aborted()).
  bool last() const { return last_; }
  // The stream ends early (upstream failure, an overflow): `bytes()` is empty, and
  // whatever a filter holds back is to be dropped, not sent.
  bool aborted() const { return aborted_; }

  // What goes on instead of bytes(). The view must stay valid until the next piece of
  // this request (keep the text in the filter's State). Holding bytes back (returning a
  // prefix and keeping the rest for the next piece) is how a filter sees across reads.
  void replace(std::string_view bytes) { bytes_ = bytes; }
  // Ends the stream after bytes() with an error event in the client's API shape; the
  // upstream is cancelled. ctx.error is set to it.
  void fail(Error error) {
    failure_ = std::move(error);
    failed_ = true;
  }
  bool failed() const { return failed_; }
  Error takeFailure() { return std::move(failure_); }

  // The filter holds the rest of the stream until something asynchronous it started
  // answers (a check of the text so far): bytes() goes on, the upstream is not read
  // meanwhile, and the filter calls ctx.resumer->resume(Continue) once, within a bounded
  // time of its own. The session then passes an empty piece (resumed(); last() as this
  // one's) to that filter and the ones after it, and sends what they give. The filters
  // after it see this piece as not the last. One filter of a chain may wait.
  void wait() {
    waiting_ = true;
    waits_last_ = last_;
    last_ = false;
  }
  bool waiting() const { return waiting_; }
  bool resumed() const { return resumed_; }
  // The piece a waiting filter is given when resumed.
  static ResponseData resumedAfter(const ResponseData& waited) {
    ResponseData r({}, waited.waits_last_);
    r.resumed_ = true;
    return r;
  }

  void setAborted() { aborted_ = true; }

  // This piece carries the end of the answer for the client (a Responses stream's
  // response.completed, although the upstream's last bytes may come later): the
  // answer-end phase (onAnswerEnd) runs before it is written, not at the last piece.
  void holdEnd() { hold_end_ = true; }
  bool endHeld() const { return hold_end_; }

 private:
  std::string_view bytes_;
  bool last_ = false;
  bool aborted_ = false;
  bool hold_end_ = false;
  bool failed_ = false;
  bool waiting_ = false, waits_last_ = false, resumed_ = false;
  Error failure_;
};

// The headers of one upstream attempt's request, as the provider adapter encoded them:
// a filter may add lines (a trace header). Values must not contain CR or LF.
class UpstreamRequestHeaders {
 public:
  explicit UpstreamRequestHeaders(std::string& lines) : lines_(lines) {}
  void add(std::string_view name, std::string_view value) {
    lines_.append(name).append(": ").append(value).append("\r\n");
  }

 private:
  std::string& lines_;
};

class Filter {
 public:
  virtual ~Filter() = default;
  virtual std::string_view name() const = 0;

  // Headers are known, the body has been read but not inspected.
  virtual FilterStatus onRequestHeaders(RequestContext&) { return FilterStatus::Continue; }
  // The body is in ctx.body; filters may inspect or rewrite it.
  virtual FilterStatus onRequestBody(RequestContext&) { return FilterStatus::Continue; }
  // Choose the upstream: the router sets ctx.model, the balancer ctx.deployment / ctx.provider.
  virtual FilterStatus onUpstreamSelect(RequestContext&) { return FilterStatus::Continue; }
  // An upstream attempt failed before anything reached the client and the gateway will
  // try again (another deployment of the model, or a fallback model): account for it
  // as a finished, failed call of ctx.deployment (ctx.status / ctx.error say how).
  virtual void onAttemptFailed(RequestContext&) {}
  // An upstream attempt is about to be sent (every attempt: retries and fallbacks too),
  // to ctx.deployment of ctx.provider; a filter may add request headers. The attempt
  // starts here and ends at onAttemptFailed, or with the request (onComplete).
  virtual void onUpstreamRequest(RequestContext&, UpstreamRequestHeaders&) {}
  // After onAttemptFailed: choose again for ctx.model (possibly a fallback), avoiding
  // the deployments in ctx.tried. May Stop (e.g. every breaker open) or Pause.
  virtual FilterStatus onReselect(RequestContext&) { return FilterStatus::Continue; }
  // An upstream answered: *ctx.response_headers are its headers (translated for the
  // client) before any filter rewrote them. Read only; every filter's runs before the
  // first onResponseHeaders (a filter that reads what the provider said, such as its
  // rate-limit headers, sees them even when an earlier filter replaces them).
  virtual void onUpstreamHeaders(const RequestContext&) {}
  // An answer is about to be written: the upstream's (ctx.status, ctx.streaming are
  // set) or the gateway's own (ctx.error or ctx.local_reply: a refusal, a fallback
  // answer), once per request. The headers the client will get are in
  // *ctx.response_headers: a filter may change, drop or add them (a value that is not
  // a literal must live in the filter's State).
  virtual void onResponseHeaders(RequestContext&) {}
  // A piece of a streamed response (only for filters whose wantsResponseData() is true:
  // the others cost nothing per piece). Synchronous: it runs per piece.
  virtual void onResponseData(RequestContext&, ResponseData&) {}
  virtual bool wantsResponseData() const { return false; }
  // Every upstream attempt (retries, fallback models) failed before anything reached the
  // client. A filter may answer instead by setting ctx.local_reply (an answer it kept) and
  // returning true: it goes out marked as a fallback answer (X-Tahua-Fallback; in a JSON
  // body "is_fallback": true), before the model's configured fallback_response. The
  // first filter that answers wins.
  virtual bool onUpstreamsFailed(RequestContext&) { return false; }
  // Whether the filter may judge whole answers at all (asked once, when it joins the
  // chain: a chain without such a filter pays nothing per request), and whether it
  // judges this request's non-streamed 2xx answer (asked once an upstream answered): it
  // is then read whole and judged (onAnswer) before anything of it is sent.
  virtual bool judgesAnswers() const { return false; }
  virtual bool judgesAnswer(const RequestContext&) const { return false; }
  // The whole answer (*ctx.answer, translated for the client), before its headers and
  // body filters run. Continue accepts it; Stop refuses it (ctx.error says why): the
  // attempt ends as a failed one whose tokens were spent (ctx.usage), and the request
  // goes on to the requested model's next fallback model, once per request; with none
  // left, ctx.error is the answer. May Pause while a check runs (the answer waits).
  virtual FilterStatus onAnswer(RequestContext&) { return FilterStatus::Continue; }
  // A whole non-streamed response body, before it is written; may be rewritten in place.
  // *ctx.response_headers are the headers that go out with it (after onResponseHeaders
  // ran): a filter may add one from what the body says (a value living in its State).
  virtual void onResponseBody(RequestContext&, std::string& /*body*/) {}
  // The answer's end is about to be released to the client: a whole upstream answer
  // after the body filters (it goes out with its head), or a stream's piece that a
  // filter held (ResponseData::holdEnd), else its last piece. Once per answer (not for
  // answers the gateway gives itself, nor a stream that failed or was cut), only for
  // filters whose holdsAnswerEnds() (asked once, when it joins the chain; a filter that
  // holds a stream's end also wants its data). A filter may Pause to finish what a
  // client must be able to rely on once it has the whole answer — a stored response any
  // replica can read — and resumes (Continue) within a bounded time of its own; the
  // answer's last bytes wait meanwhile. Stop is taken as Continue: the answer is made.
  virtual FilterStatus onAnswerEnd(RequestContext&) { return FilterStatus::Continue; }
  virtual bool holdsAnswerEnds() const { return false; }
  // Always runs last, once, whatever happened (local reply, error, client gone).
  virtual void onComplete(RequestContext&) {}

  // Per-request state (see FilterWithState): its size and alignment, and how to make
  // and destroy one in the block the chain lays out. Filters without state keep 0.
  virtual std::size_t stateSize() const { return 0; }
  virtual std::size_t stateAlign() const { return 1; }
  virtual void constructState(void*) const {}
  virtual void destroyState(void*) const {}

 private:
  friend class FilterChain;

 protected:
  std::size_t state_offset_ = 0;  // set by the chain when the filter is added
};

// A filter with per-request state `State` (default-constructible): state(ctx) is this
// request's, made before the first phase and destroyed after onComplete.
template <class State>
class FilterWithState : public Filter {
 public:
  std::size_t stateSize() const final { return sizeof(State); }
  std::size_t stateAlign() const final { return alignof(State); }
  void constructState(void* at) const final { ::new (at) State(); }
  void destroyState(void* at) const final { std::launder(static_cast<State*>(at))->~State(); }

 protected:
  State& state(RequestContext& ctx) const { return *std::launder(reinterpret_cast<State*>(ctx.filter_state + state_offset_)); }
  const State& state(const RequestContext& ctx) const {
    return *std::launder(reinterpret_cast<const State*>(ctx.filter_state + state_offset_));
  }
};

// The request phases that may Stop or Pause.
// End: onAnswerEnd, run over the filters that hold answer ends (`next` counts those).
enum class RequestPhase { Headers, Body, UpstreamSelect, Reselect, Answer, End };

class FilterChain {
 public:
  void add(std::unique_ptr<Filter> filter);

  // Bytes of the per-request state block (every filter's State) and its alignment.
  std::size_t stateBytes() const { return state_bytes_; }
  static constexpr std::size_t kStateAlign = alignof(std::max_align_t);

  // Makes every filter's State in `block` (stateBytes() bytes, kStateAlign-aligned) and
  // points ctx.filter_state at it. Before the first phase.
  void begin(RequestContext& ctx, std::byte* block);

  // Runs a request phase from filter `next` on: Continue when every filter continued,
  // Stop, or Pause (then `next` is the filter after the paused one: run again from it
  // once the resumer said Continue). Reselect clears the previous attempt's error first
  // (only when `next` is 0).
  FilterStatus run(RequestPhase phase, RequestContext& ctx, std::size_t& next);

  void upstreamRequest(RequestContext& ctx, UpstreamRequestHeaders& headers);
  void attemptFailed(RequestContext& ctx);
  // onUpstreamsFailed in order until a filter answers; true if one did.
  bool upstreamsFailed(RequestContext& ctx);
  // Whether a filter judges this request's whole answer (onAnswer, RequestPhase::Answer).
  bool judgesAnswer(const RequestContext& ctx) const;
  void responseHeaders(RequestContext& ctx);
  // Passes `data` through every filter that wants response data, in order, from the
  // `from`th (0: all). Returns the index of the filter that waited (ResponseData::wait),
  // to resume from, or npos.
  std::size_t responseData(RequestContext& ctx, ResponseData& data, std::size_t from = 0);
  bool wantsResponseData() const { return !data_filters_.empty(); }
  // Whether a filter may hold an answer's end (RequestPhase::End): else the session
  // never runs that phase.
  bool holdsAnswerEnds() const { return !enders_.empty(); }
  void responseBody(RequestContext& ctx, std::string& body);
  // onComplete for every filter, then every State is destroyed (if begin() ran).
  void complete(RequestContext& ctx);

  std::size_t size() const { return filters_.size(); }

 private:
  std::vector<std::unique_ptr<Filter>> filters_;
  std::vector<Filter*> data_filters_;   // those whose wantsResponseData()
  std::vector<Filter*> judges_;         // those whose judgesAnswers()
  std::vector<Filter*> enders_;         // those whose holdsAnswerEnds()
  std::vector<Filter*> stateful_;       // those with a State
  std::size_t state_bytes_ = 0;
};

}  // namespace tahua
