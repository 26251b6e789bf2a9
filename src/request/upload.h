// An upload (a multipart/form-data request body: audio, an image to edit, a file) as
// the gateway holds it: the body spooled to an unnamed temporary file as it arrived,
// and where its parts lie. Filters see the form's text fields as a JSON object in
// ctx.body (the model, a prompt, `stream`: routing, limits and guardrails read them as
// they read any request); the file parts stay on disk and go to the upstream from
// there, in a multipart body the adapter writes around them (encodeUploadBody).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "http/multipart.h"

namespace tahua {

struct Upload {
  int fd = -1;                 // the spooled body (closed with the request)
  std::uint64_t size = 0;      // its bytes
  std::string boundary;        // the client's multipart boundary
  std::vector<FormPart> parts; // in the client's order; file parts have no value

  const FormPart* file(std::string_view name) const {
    for (const auto& p : parts)
      if (p.file() && p.name == name) return &p;
    return nullptr;
  }
};

}  // namespace tahua
