#include "core/temp_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

namespace tahua {

int openTempFile(const std::string& dir, std::string& error) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    std::string name = dir + "/tahua-upload-XXXXXX";
    fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(name.c_str());
  }
  if (fd < 0) error = ::strerror(errno);
  return fd;
}

std::string spoolDirectory(const std::string& configured) {
  if (!configured.empty()) return configured;
  const char* tmp = ::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

}  // namespace tahua
