// The pieces of a Content-Security-Policy for a page built into the binary (the console,
// the dashboard): hash sources computed from the embedded text, so that a policy cannot
// drift from the page it is served with.
#pragma once

#include <string>
#include <string_view>

namespace tahua {

// The text of the page's first <tag> element, e.g. "style" or "script" ('' without one).
std::string_view firstElementText(std::string_view page, std::string_view tag);

// 'sha256-<base64 of the text's SHA-256>': a CSP source that allows exactly that text.
std::string hashSource(std::string_view text);

}  // namespace tahua
