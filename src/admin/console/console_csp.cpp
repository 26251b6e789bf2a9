#include "admin/console/console_page.h"

#include <string>

#include "http/page_csp.h"

namespace tahua {

std::string_view consoleContentSecurityPolicy() {
  static const std::string policy = "default-src 'none'; script-src 'self'; style-src " +
                                    hashSource(firstElementText(consolePage(), "style")) +
                                    "; connect-src 'self'; img-src 'self' data:; form-action 'none'; base-uri 'none'; "
                                    "frame-ancestors 'none'";
  return policy;
}

}  // namespace tahua
