// Who is calling the admin API, known to every admin handler: a global token (admin.token,
// named "admin", or one of admin.tokens) or a tenant's token (admin.tenant_tokens), and
// what the handler says about the change it made, for the audit log (admin/audit_log.h).
#pragma once

#include <string>

namespace tahua {

// What a handler tells the audit log about its change: the action's name, the resource
// it changed, a short summary (never a secret) and the tenant it concerns, if any.
struct AuditNote {
  std::string action;  // "key.create", ...; empty: named after the URL and method
  std::string target;  // the resource's id
  std::string detail;
  std::string tenant;  // the tenant the change concerns (a tenant admin sees it)
};

struct AdminCaller {
  bool full = false;   // a global token: everything; else a tenant's keys only
  std::string tenant;  // a tenant token's tenant
  std::string name;    // the token's name: "admin", an admin.tokens name or a tenant token's
  // Filled by the handler that made a change, read once the answer is known (the
  // request's caller is one object for its whole handling, passed as const&).
  mutable AuditNote note;
};

}  // namespace tahua
