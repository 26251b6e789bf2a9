#pragma once

#include <memory>

#include "filters/filter.h"

namespace tahua {

// Prompt templates (`prompt_templates`; docs/prompt-templates.md). A chat, messages or
// Responses request that carries `prompt: {id, version, variables}` gets the template's
// messages rendered into it before routing: its variables checked against their types
// (400 invalid_prompt naming each problem), `{{variable}}` placeholders substituted into
// the parsed message text (never into JSON text), the template's default model and
// parameters set where the request has none, and the `prompt` field removed (no
// provider sees it). An unknown id or version is 404 prompt_not_found. The records say
// which template and version (RecordField::Prompt). Requests without `prompt` cost one
// scan of their body for the key. Left out of the chain when no template is configured.
std::unique_ptr<Filter> makePromptFilter();

}  // namespace tahua
