#include "http/page_csp.h"

#include "core/base64.h"
#include "core/sha256.h"

namespace tahua {

std::string_view firstElementText(std::string_view page, std::string_view tag) {
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  const std::size_t at = page.find(open);
  if (at == std::string_view::npos) return {};
  const std::size_t from = at + open.size();
  const std::size_t end = page.find(close, from);
  return end == std::string_view::npos ? std::string_view{} : page.substr(from, end - from);
}

std::string hashSource(std::string_view text) {
  const Sha256 digest = sha256(text);
  return "'sha256-" + base64Encode(std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size())) + "'";
}

}  // namespace tahua
