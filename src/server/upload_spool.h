// Spools an upload's body to an unnamed temporary file as it is read, scanning its
// multipart form on the way (http/multipart.h), and then describes it as an Upload
// (request/upload.h) with the form's text fields as a JSON object for the filters.
// The file has no name (O_TMPFILE): it is gone when the request ends or the process
// dies, and nothing else can open it.
#pragma once

#include <optional>
#include <string>

#include "core/error.h"
#include "http/multipart.h"
#include "request/upload.h"
#include "server/request_body.h"

namespace tahua {

class UploadSpool final : public BodySink {
 public:
  UploadSpool(std::string boundary, MultipartScanner::Limits limits);
  ~UploadSpool();
  UploadSpool(const UploadSpool&) = delete;
  UploadSpool& operator=(const UploadSpool&) = delete;

  // Makes the file in `dir`; an error says why not (logged by the caller).
  std::optional<std::string> open(const std::string& dir);
  bool write(std::string_view bytes) override;
  // The body ended: the form must be complete. Then the upload, and the text fields as
  // a JSON object (`stream` as a boolean, a name seen twice or ending in [] as a list).
  std::optional<Error> finish(std::string& fields_json);

  const Upload& upload() const { return upload_; }
  // Why write() refused (a malformed form, a disk error).
  const std::optional<Error>& failure() const { return failure_; }

 private:
  Upload upload_;
  MultipartScanner scanner_;
  std::optional<Error> failure_;
};

}  // namespace tahua
