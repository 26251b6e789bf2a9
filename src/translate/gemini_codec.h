// Google Gemini API (generativelanguage.googleapis.com, v1beta) codec: the canonical
// OpenAI chat request to `models/{model}:generateContent` /
// `:streamGenerateContent?alt=sse`, and Gemini's GenerateContentResponse (whole, or one
// per SSE event) back to ChatResult / ChatChunk.
//
// Mapping decisions worth knowing (details in the .cpp):
// - system/developer messages, wherever they appear, become `systemInstruction`.
// - Gemini names no tool calls, so ids are invented ("call_..."); a tool result is
//   matched back to its function name through the id of the assistant's earlier call.
// - `n` other than 1 is rejected: one candidate is decoded.
// - Gemini streams have no end marker; a stream counts as complete once an event
//   carried a finishReason (or a prompt block reason).
// - Parts marked `thought: true` (thinking summaries) are not part of the answer text.
#pragma once

#include <memory>

#include "translate/chat.h"

namespace tahua {

std::unique_ptr<VendorCodec> makeGeminiCodec();

}  // namespace tahua
