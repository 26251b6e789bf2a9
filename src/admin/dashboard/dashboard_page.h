// The dashboard's page (dashboard.html beside this file), built into the binary: one
// self-contained HTML file with its script and styles inline, no external assets.
#pragma once

#include <string_view>

namespace tahua {

std::string_view dashboardPage();

// No origin but the admin listener's own ('self'); the page's one inline <script> and
// one <style> allowed by their SHA-256 (computed from the embedded page, so they cannot
// drift from it): no other script runs, even if a name slipped through unescaped; no
// style attribute (the script sets styles through the DOM); no framing.
std::string_view dashboardContentSecurityPolicy();

}  // namespace tahua
