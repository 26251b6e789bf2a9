#include "admin/console/console_page.h"

#include <string>

#include "core/base64.h"
#include "core/sha256.h"

namespace tahua {
namespace {

// The text of the page's first <style> element ('' without one).
std::string_view styleText(std::string_view page) {
  constexpr std::string_view kOpen = "<style>", kClose = "</style>";
  const std::size_t open = page.find(kOpen);
  if (open == std::string_view::npos) return {};
  const std::size_t from = open + kOpen.size();
  const std::size_t close = page.find(kClose, from);
  return close == std::string_view::npos ? std::string_view{} : page.substr(from, close - from);
}

std::string buildPolicy() {
  const Sha256 digest = sha256(styleText(consolePage()));
  const std::string style_hash =
      base64Encode(std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
  return "default-src 'none'; script-src 'self'; style-src 'sha256-" + style_hash +
         "'; connect-src 'self'; img-src 'self' data:; form-action 'none'; base-uri 'none'; frame-ancestors 'none'";
}

}  // namespace

std::string_view consoleContentSecurityPolicy() {
  static const std::string policy = buildPolicy();
  return policy;
}

}  // namespace tahua
