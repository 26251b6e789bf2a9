#pragma once

#include <memory>

#include "filters/filter.h"

namespace tahua {

struct WorkerMetrics;
class PendingRecords;
class WorkerServices;

// Guardrails (`guardrails.policies`, docs/guardrails.md): the policies attached to a
// request (by model, route, tenant, key) check its text before it is routed upstream
// and the answer's text as it goes to the client.
// - Input (onUpstreamSelect, after the router and the plugins, before the rate limits:
//   a blocked request is never charged): `block` answers 400 content_blocked naming the
//   rule; `redact` masks the match in the body the upstream gets; `flag` only records.
//   A `moderation` rule sends the request's text (after the local redactions) to an
//   endpoint in OpenAI's moderation shape, the request paused meanwhile; no verdict in
//   time lets it pass (on_error: allow) or refuses it 503 guardrail_unavailable (block).
// - Output, non-streamed (onResponseBody): `block` empties the answer and marks it
//   stopped by a content filter (its tokens are billed); `redact` masks; `flag` records.
// - Output, streamed (onResponseData): events are held back until no match can still
//   cover their text (at most the rules' longest match, bounded by max_match_chars, per
//   choice / block / tool call); `redact` rewrites held events so the masked text never
//   leaves; `block` ends the stream with the API's error event.
// - Answer quality (a `quality` rule): the prompt's last user message and the answer are
//   embedded by one of the gateway's models; a cosine similarity below the threshold is
//   a low-quality answer. A non-streamed answer waits for the verdict (onAnswer): flagged
//   in x-tahua-quality, or refused (block: 502 response_quality_low, after the next
//   fallback model was tried once). A stream is never delayed: it is checked once it
//   ended, and the verdict goes to the records (late ones through PendingRecords).
// Every verdict is counted (tahua_guardrail_actions_total), logged without the matched
// text, named in `x-tahua-guardrails` while the headers are still to be sent, and in the
// records' `guardrails` field.
std::unique_ptr<Filter> makeGuardrailFilter(WorkerMetrics& metrics, WorkerServices& services, PendingRecords& records);

}  // namespace tahua
