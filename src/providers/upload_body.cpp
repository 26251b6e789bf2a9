#include "providers/upload_body.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "core/json_read.h"
#include "request/upload.h"

namespace tahua {
namespace bj = boost::json;

namespace {

// A field name in a Content-Disposition quoted string: what browsers escape.
std::string quotedName(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '"') out += "%22";
    else if (c == '\r') out += "%0D";
    else if (c == '\n') out += "%0A";
    else out += c;
  }
  return out;
}

}  // namespace

std::variant<std::string, Error> encodeUploadBody(const RequestContext& ctx, UpstreamRequest& req) {
  const Upload& upload = *ctx.upload;
  const std::string dash = "--" + upload.boundary;
  const std::string delimiter = "\r\n" + dash;
  boost::system::error_code ec;
  const bj::value fields = readJson(ctx.body, ec);
  if (ec || !fields.is_object()) return Error{ErrorKind::InvalidRequest, "The form's fields are not an object."};
  SpooledBody body;
  body.fd = upload.fd;
  std::string text;
  auto addField = [&](std::string_view name, const bj::value& v) -> std::optional<Error> {
    std::string value;
    if (v.is_string()) value = std::string(v.get_string());
    else if (v.is_bool()) value = v.get_bool() ? "true" : "false";
    else if (v.is_null()) return std::nullopt;
    else value = bj::serialize(v);
    if (value.find(delimiter) != std::string::npos || value.starts_with(dash))
      return Error{ErrorKind::InvalidRequest, "The form field '" + std::string(name) + "' holds the multipart boundary."};
    text.append(dash).append("\r\nContent-Disposition: form-data; name=\"").append(quotedName(name)).append("\"\r\n\r\n");
    text.append(value).append("\r\n");
    return std::nullopt;
  };
  for (const auto& [name, value] : fields.get_object()) {
    if (value.is_array()) {
      for (const auto& item : value.get_array())
        if (auto err = addField(name, item)) return std::move(*err);
    } else if (auto err = addField(name, value)) {
      return std::move(*err);
    }
  }
  for (const FormPart& part : upload.parts) {
    if (!part.file()) continue;
    text.append(dash).append("\r\n");
    body.pieces.push_back({std::move(text), part.head_begin, part.data_end - part.head_begin});
    text = "\r\n";
  }
  text.append(dash).append("--\r\n");
  body.pieces.push_back({std::move(text), 0, 0});
  req.spooled = std::move(body);
  // A boundary with characters a token may not hold (RFC 2046 allows spaces) is quoted.
  const bool token = upload.boundary.find_first_of(" ()<>@,;:\\\"/[]?=") == std::string::npos;
  return "multipart/form-data; boundary=" + (token ? upload.boundary : "\"" + upload.boundary + "\"");
}

}  // namespace tahua
