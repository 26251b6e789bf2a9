#include "admin/dashboard/dashboard_page.h"

#include <string>

#include "http/page_csp.h"

namespace tahua {

std::string_view dashboardContentSecurityPolicy() {
  const std::string_view page = dashboardPage();
  static const std::string policy = "default-src 'none'; script-src " + hashSource(firstElementText(page, "script")) +
                                    "; style-src " + hashSource(firstElementText(page, "style")) +
                                    "; connect-src 'self'; img-src 'self' data:; form-action 'none'; base-uri 'none'; "
                                    "frame-ancestors 'none'";
  return policy;
}

}  // namespace tahua
