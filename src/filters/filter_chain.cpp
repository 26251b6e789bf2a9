#include "filters/filter.h"

namespace tahua {

std::string_view endpointPath(Endpoint e) {
  switch (e) {
    case Endpoint::ChatCompletions: return "/chat/completions";
    case Endpoint::Completions: return "/completions";
    case Endpoint::Embeddings: return "/embeddings";
    case Endpoint::Moderations: return "/moderations";
    case Endpoint::ImagesGenerations: return "/images/generations";
    case Endpoint::Rerank: return "/rerank";
    case Endpoint::AudioTranscriptions: return "/audio/transcriptions";
    case Endpoint::AudioTranslations: return "/audio/translations";
    case Endpoint::AudioSpeech: return "/audio/speech";
    case Endpoint::ImagesEdits: return "/images/edits";
    case Endpoint::Files: return "/files";
    case Endpoint::FileObject: return "/files/";
    case Endpoint::FileContent: return "/files/";
    case Endpoint::Batches: return "/batches";
    case Endpoint::BatchObject: return "/batches/";
    case Endpoint::BatchCancel: return "/batches/";
    case Endpoint::Realtime: return "/realtime";
    case Endpoint::Mcp: return "";  // the server's own URL (providers/mcp/)
    case Endpoint::Models: return "/models";
    case Endpoint::Responses: return "/responses";
    case Endpoint::Messages: return "/messages";
    case Endpoint::CountTokens: return "/messages/count_tokens";
    case Endpoint::StoredResponse: return "/responses/";
    case Endpoint::None: return "";
  }
  return "";
}

void FilterChain::add(std::unique_ptr<Filter> filter) {
  if (filter->stateSize() > 0) {
    // Each State at the next offset its alignment allows, in one block per request.
    const std::size_t align = filter->stateAlign();
    state_bytes_ = (state_bytes_ + align - 1) / align * align;
    filter->state_offset_ = state_bytes_;
    state_bytes_ += filter->stateSize();
    stateful_.push_back(filter.get());
  }
  if (filter->wantsResponseData()) data_filters_.push_back(filter.get());
  if (filter->judgesAnswers()) judges_.push_back(filter.get());
  if (filter->holdsAnswerEnds()) enders_.push_back(filter.get());
  filters_.push_back(std::move(filter));
}

void FilterChain::begin(RequestContext& ctx, std::byte* block) {
  ctx.filter_state = block;
  for (Filter* f : stateful_) f->constructState(block + f->state_offset_);
}

FilterStatus FilterChain::run(RequestPhase phase, RequestContext& ctx, std::size_t& next) {
  if (phase == RequestPhase::End) {
    // The answer is made: only a Pause matters (an error set now changes nothing sent).
    while (next < enders_.size())
      if (enders_[next++]->onAnswerEnd(ctx) == FilterStatus::Pause) return FilterStatus::Pause;
    return FilterStatus::Continue;
  }
  FilterStatus (Filter::*hook)(RequestContext&) = nullptr;
  switch (phase) {
    case RequestPhase::Headers: hook = &Filter::onRequestHeaders; break;
    case RequestPhase::Body: hook = &Filter::onRequestBody; break;
    case RequestPhase::UpstreamSelect: hook = &Filter::onUpstreamSelect; break;
    case RequestPhase::Reselect:
      hook = &Filter::onReselect;
      if (next == 0) {
        ctx.error.reset();
        ctx.status = 0;
      }
      break;
    case RequestPhase::Answer: hook = &Filter::onAnswer; break;
    case RequestPhase::End: break;  // above
  }
  while (next < filters_.size()) {
    const FilterStatus status = ((*filters_[next++]).*hook)(ctx);
    if (status != FilterStatus::Continue) return status;
    // A filter that recorded an error without saying Stop still stops the request.
    if (ctx.error || ctx.local_reply) return FilterStatus::Stop;
  }
  return FilterStatus::Continue;
}

void FilterChain::upstreamRequest(RequestContext& ctx, UpstreamRequestHeaders& headers) {
  for (auto& f : filters_) f->onUpstreamRequest(ctx, headers);
}
void FilterChain::attemptFailed(RequestContext& ctx) {
  for (auto& f : filters_) f->onAttemptFailed(ctx);
}
bool FilterChain::upstreamsFailed(RequestContext& ctx) {
  for (auto& f : filters_)
    if (f->onUpstreamsFailed(ctx)) return true;
  return false;
}
bool FilterChain::judgesAnswer(const RequestContext& ctx) const {
  for (const Filter* f : judges_)
    if (f->judgesAnswer(ctx)) return true;
  return false;
}
void FilterChain::responseHeaders(RequestContext& ctx) {
  if (ctx.response_headers && !ctx.error && !ctx.local_reply)
    for (auto& f : filters_) f->onUpstreamHeaders(ctx);
  for (auto& f : filters_) f->onResponseHeaders(ctx);
}
std::size_t FilterChain::responseData(RequestContext& ctx, ResponseData& data, std::size_t from) {
  std::size_t waiter = static_cast<std::size_t>(-1);
  for (std::size_t i = from; i < data_filters_.size(); ++i) {
    const bool waited = data.waiting();
    data_filters_[i]->onResponseData(ctx, data);
    if (!waited && data.waiting()) waiter = i;
    if (data.failed()) return static_cast<std::size_t>(-1);
  }
  return waiter;
}
void FilterChain::responseBody(RequestContext& ctx, std::string& body) {
  for (auto& f : filters_) f->onResponseBody(ctx, body);
}
void FilterChain::complete(RequestContext& ctx) {
  for (auto& f : filters_) f->onComplete(ctx);
  if (!ctx.filter_state) return;
  for (Filter* f : stateful_) f->destroyState(ctx.filter_state + f->state_offset_);
  ctx.filter_state = nullptr;
}

}  // namespace tahua
