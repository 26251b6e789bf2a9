// The admin API's error answer, one shape for every endpoint:
// {"error": {"message", "type": "admin_error", "code"}}.
#pragma once

#include <string>
#include <string_view>

#include "server/session_host.h"

namespace tahua {

AdminReply adminError(int status, std::string_view code, std::string message);

}  // namespace tahua
