#include "server/upload_spool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include "core/log.h"
#include "core/temp_file.h"

namespace tahua {
namespace bj = boost::json;

UploadSpool::UploadSpool(std::string boundary, MultipartScanner::Limits limits) : scanner_(boundary, limits) {
  upload_.boundary = std::move(boundary);
}

UploadSpool::~UploadSpool() {
  if (upload_.fd >= 0) ::close(upload_.fd);
}

std::optional<std::string> UploadSpool::open(const std::string& dir) {
  std::string error;
  upload_.fd = openTempFile(dir, error);
  if (upload_.fd < 0) return error;
  return std::nullopt;
}

bool UploadSpool::write(std::string_view bytes) {
  if (!scanner_.feed(bytes)) {
    failure_ = Error{ErrorKind::InvalidRequest, "The multipart form is malformed: " + scanner_.error()};
    return false;
  }
  while (!bytes.empty()) {
    const ssize_t n = ::write(upload_.fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      log::error("cannot spool an upload", {{"error", ::strerror(errno)}});
      failure_ = Error{ErrorKind::Overloaded, "The gateway could not store the upload; please retry shortly."};
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
    upload_.size += static_cast<std::uint64_t>(n);
  }
  return true;
}

std::optional<Error> UploadSpool::finish(std::string& fields_json) {
  if (!scanner_.finish()) return Error{ErrorKind::InvalidRequest, "The multipart form is malformed: " + scanner_.error()};
  upload_.parts = std::move(scanner_.parts());
  bj::object fields;
  for (const FormPart& p : upload_.parts) {
    if (p.file()) continue;
    const bool list = p.name.size() > 2 && p.name.ends_with("[]");
    bj::value value;
    if (p.name == "stream" && (p.value == "true" || p.value == "false")) value = p.value == "true";
    else value = bj::string(p.value);
    if (bj::value* seen = fields.if_contains(p.name)) {
      if (!seen->is_array()) *seen = bj::array{std::move(*seen)};
      seen->get_array().push_back(std::move(value));
    } else if (list) {
      fields.emplace(p.name, bj::array{std::move(value)});
    } else {
      fields.emplace(p.name, std::move(value));
    }
  }
  fields_json = bj::serialize(fields);
  return std::nullopt;
}

}  // namespace tahua
