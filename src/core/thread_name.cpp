#include "core/thread_name.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>

namespace tahua {

void nameThisThread(std::string_view name) {
  char text[16];
  const std::size_t n = std::min(name.size(), sizeof text - 1);
  std::memcpy(text, name.data(), n);
  text[n] = '\0';
  ::pthread_setname_np(::pthread_self(), text);
}

void nameProcessAfter(const char* argv0) {
  if (!argv0 || !*argv0) return;
  std::string_view path(argv0);
  if (const auto slash = path.rfind('/'); slash != std::string_view::npos) path.remove_prefix(slash + 1);
  if (!path.empty()) nameThisThread(path);
}

}  // namespace tahua
