// Where the text is in a request or an answer of each API shape, for the guardrails:
// every string a rule may look at, with what it is (the rule's `inspect` targets), as
// pointers into a parsed body so that a redaction is written back in place.
#pragma once

#include <boost/json/fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "request/request_context.h"

namespace tahua::guardrail_texts {

struct Text {
  boost::json::string* text;
  std::uint8_t target;  // guardrails::Target
  unsigned channel;     // answers: the choice (or content block / output item) it belongs to
};

// Chat messages, Anthropic messages and `system`, Responses `input` and `instructions`,
// completions' `prompt`, embeddings' `input`: the user's and the history's text (input),
// system prompts (system), tool-call arguments of the history (tool_arguments; for
// Anthropic's tool_use `input` objects, each string inside).
// MCP (/mcp): a tools/call's arguments (tool_arguments), a prompts/get's (input); a
// server's answer's text, its tools' results, prompts' messages, resources' contents
// (output).
void requestTexts(Endpoint endpoint, boost::json::value& body, std::vector<Text>& out);

// The request's last user message, as text (its text parts joined by newlines): what the
// answer-quality check compares the answer with. "" when there is none.
std::string lastUserText(Endpoint endpoint, boost::json::value& body);

// A whole (non-streamed) answer: its text (output) and tool-call arguments
// (output_tool_calls), per choice / content block / output item.
void answerTexts(Endpoint endpoint, boost::json::value& body, std::vector<Text>& out);

// Marks a whole answer as stopped by a content filter: its text and tool calls emptied,
// chat/completions finish_reason "content_filter", Anthropic stop_reason "refusal",
// Responses status "incomplete" with reason "content_filter".
void blockAnswer(Endpoint endpoint, boost::json::value& body);

// Channels: a text's place in an answer, so that a match never spans two of them. Chat
// and completions: choice index × 1024 (+ tool call index + 1 for its arguments);
// Anthropic: content block index × 1024; Responses: output item index × 1024.
//
// One event of a stream (its JSON data): the text pieces it carries, by channel, and the
// groups of channels it closes (by base, a multiple of 1024: a choice's finish_reason, a
// block's stop, an output item's done). `full`: the event repeats a whole text already streamed
// (Responses' *.done and response.completed), which gets the stream's redactions again.
struct EventTexts {
  std::vector<Text> pieces;
  std::vector<unsigned> closes;
  bool full = false;
};
void eventTexts(Endpoint endpoint, boost::json::value& event, EventTexts& out);

}  // namespace tahua::guardrail_texts
