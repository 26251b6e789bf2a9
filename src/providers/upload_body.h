// The multipart body an upload goes to the upstream in: the form's text fields as the
// filters left them (ctx.body, a JSON object: the model name already rewritten to the
// upstream's), then the client's file parts, headers and content, as they lie in the
// spool (request/upload.h), sent from the file by the transport.
#pragma once

#include <optional>
#include <string>

#include "core/error.h"
#include "providers/exchange.h"
#include "request/request_context.h"

namespace tahua {

// Fills req.spooled; returns the Content-Type to send, or an error (a text field that
// is not text, or holds the boundary).
std::variant<std::string, Error> encodeUploadBody(const RequestContext& ctx, UpstreamRequest& req);

}  // namespace tahua
