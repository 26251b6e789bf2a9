// The web console (/admin/console): its page (console.html beside this file, markup and
// styles) and its script (console.js, served as /admin/console.js), both built into the
// binary, and the Content-Security-Policy they are served with.
#pragma once

#include <string_view>

namespace tahua {

std::string_view consolePage();
std::string_view consoleScript();

// No origin but the admin listener's own ('self'), no inline script, the page's one
// <style> element allowed by its SHA-256 (computed from the embedded page, so it cannot
// drift from it), and no framing.
std::string_view consoleContentSecurityPolicy();

}  // namespace tahua
