// How a request ended, in one word: the access log's `end_reason`, the usage record's,
// a span's. Derived from what the request recorded (status, error), so every consumer
// says the same thing.
#pragma once

#include <string_view>

#include "request/request_context.h"

namespace tahua {

inline std::string_view endReason(const RequestContext& ctx) {
  if (ctx.status == 499) return "client_gone";
  if (!ctx.error) return ctx.local_reply ? "local" : "done";
  switch (ctx.error->kind) {
    case ErrorKind::Draining: return "drain";
    case ErrorKind::ClientTooSlow: return "overflow";
    case ErrorKind::UpstreamTimeout: return "timeout";
    case ErrorKind::RateLimited:
    case ErrorKind::QuotaExceeded:
    case ErrorKind::LimitTooSmall:
    case ErrorKind::ConcurrencyLimited:
      // A limit that ended a stream it had let start; before that, a refusal.
      return ctx.first_byte && ctx.streaming ? "over_budget" : "refused";
    case ErrorKind::MissingApiKey:
    case ErrorKind::InvalidApiKey:
    case ErrorKind::ModelNotAllowed:
    case ErrorKind::IdempotencyInProgress:
    case ErrorKind::IdempotencyKeyReused:
    case ErrorKind::IdempotencyNotKept: return "refused";
    case ErrorKind::ResponseQualityLow: return "low_quality";  // an answer the quality check refused
    default: break;
  }
  if (ctx.error->source() == ErrorSource::Upstream) return "upstream_error";
  return "error";
}

}  // namespace tahua
