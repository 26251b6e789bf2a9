#include "filters/filter.h"

namespace tahua {

std::string_view endpointPath(Endpoint e) {
  switch (e) {
    case Endpoint::ChatCompletions: return "/chat/completions";
    case Endpoint::Completions: return "/completions";
    case Endpoint::Embeddings: return "/embeddings";
    case Endpoint::Models: return "/models";
    case Endpoint::Responses: return "/responses";
    case Endpoint::Messages: return "/messages";
    case Endpoint::CountTokens: return "/messages/count_tokens";
    case Endpoint::None: return "";
  }
  return "";
}

namespace {
template <class Hook>
FilterStatus runUntilStop(std::vector<std::unique_ptr<Filter>>& filters, RequestContext& ctx, Hook hook,
                          std::size_t from = 0) {
  for (std::size_t i = from; i < filters.size(); ++i) {
    const FilterStatus status = ((*filters[i]).*hook)(ctx);
    if (status == FilterStatus::Stop) return FilterStatus::Stop;
    if (status == FilterStatus::Wait) {
      ctx.resume_filter = i;
      return FilterStatus::Wait;
    }
    // A filter that recorded an error without saying Stop still stops the request.
    if (ctx.error || ctx.local_reply) return FilterStatus::Stop;
  }
  return FilterStatus::Continue;
}
}  // namespace

FilterStatus FilterChain::requestHeaders(RequestContext& ctx) {
  return runUntilStop(filters_, ctx, &Filter::onRequestHeaders);
}
FilterStatus FilterChain::requestBody(RequestContext& ctx) {
  return runUntilStop(filters_, ctx, &Filter::onRequestBody);
}
FilterStatus FilterChain::upstreamSelect(RequestContext& ctx) {
  return runUntilStop(filters_, ctx, &Filter::onUpstreamSelect);
}
FilterStatus FilterChain::resumeUpstreamSelect(RequestContext& ctx) {
  return runUntilStop(filters_, ctx, &Filter::onUpstreamSelect, ctx.resume_filter);
}
void FilterChain::attemptFailed(RequestContext& ctx) {
  for (auto& f : filters_) f->onAttemptFailed(ctx);
}
FilterStatus FilterChain::reselect(RequestContext& ctx) {
  ctx.error.reset();
  ctx.status = 0;
  return runUntilStop(filters_, ctx, &Filter::onReselect);
}
void FilterChain::responseHeaders(RequestContext& ctx) {
  for (auto& f : filters_) f->onResponseHeaders(ctx);
}
void FilterChain::responseChunk(RequestContext& ctx, std::string_view bytes) {
  for (auto& f : filters_) f->onResponseChunk(ctx, bytes);
}
void FilterChain::complete(RequestContext& ctx) {
  for (auto& f : filters_) f->onComplete(ctx);
}

}  // namespace tahua
