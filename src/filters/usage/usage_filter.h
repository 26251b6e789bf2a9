// Accounting: what a finished request is billed, and its usage record.
//
// First in the chain, so its onComplete runs before every other filter's: it settles
// ctx.usage once for all of them (metrics, the rate-limit calibration, the access log
// and the record read the same numbers). An answer that reached the client without a
// usage report (a stream the client or the upstream cut, an upstream that reports
// none) is billed what was delivered: the prompt as the rate-limit reservation
// estimates it (body bytes / 4) and the completion text the client received, counted
// by the token estimator as it went by. Nothing delivered: nothing billed.
//
// With `usage` enabled it then writes one record per request (401s excepted: they have
// no tenant, and a flood of bad keys must not flood the billing sinks) into the
// worker's ExportBuffer, packed (telemetry/usage_record.h: numbers and copied strings, no
// JSON); the UsageExporter formats and delivers it. The record's shape is
// docs/usage-record.schema.json.
//
// A record whose quality verdict is still pending when the request ends (the guardrails'
// asynchronous check) goes to PendingRecords, which writes it with the verdict (or
// without, after 2 s, and the verdict in a second record). An answer a filter refused
// before it was sent (onAnswer: the quality check), its tokens spent, gets a record of
// its own when its attempt ends; its tokens are then added to the request's, so the
// limits and metrics count both calls.
#pragma once

#include <memory>

#include "filters/filter.h"
#include "telemetry/export_queue.h"

namespace tahua {
class PendingRecords;
}

namespace tahua {

// `records` may be disabled (no usage export): usage is still settled.
std::unique_ptr<Filter> makeUsageFilter(const Config& config, ExportBuffer& records, PendingRecords* pending);

}  // namespace tahua
