#include "filters/guardrails/held_events.h"

#include <algorithm>

#include "filters/guardrails/chat_event_texts.h"

namespace tahua::guardrail_stream {

void HeldEvents::append(std::string_view more) {
  // kEventPadding bytes stay readable past the end (their content does not matter to
  // simdjson; they are written once, so that no checker sees a read of memory never
  // written): every one-line event in the buffer is read in place.
  const std::size_t size = bytes_.size() + more.size();
  if (bytes_.capacity() < size + guardrail_texts::kEventPadding) {
    bytes_.reserve(std::max(size + guardrail_texts::kEventPadding, 2 * bytes_.capacity()));
    bytes_.append(more);
    bytes_.append(guardrail_texts::kEventPadding, '\0');
    bytes_.resize(size);
  } else {
    bytes_.append(more);
  }
}

void HeldEvents::forgetReleased() {
  const std::size_t keep = held_.empty() ? scanned_ : held_.front().begin;
  const std::size_t n = keep - base_;
  if (n == 0) return;
  if (n == bytes_.size()) bytes_.clear();
  else bytes_.erase(0, n);
  base_ = keep;
}

void HeldEvents::drop() {
  held_.clear();
  held_bytes_ = 0;
  base_ += bytes_.size();
  scanned_ = base_;
  bytes_.clear();
}

}  // namespace tahua::guardrail_stream
