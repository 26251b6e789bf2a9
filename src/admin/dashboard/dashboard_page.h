// The dashboard's page (dashboard.html beside this file), built into the binary: one
// self-contained HTML file with its script and styles inline, no external assets.
#pragma once

#include <string_view>

namespace tahua {

std::string_view dashboardPage();

}  // namespace tahua
