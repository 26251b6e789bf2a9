// Why: glibc's per-thread cache (tcache) keeps 7 freed blocks of each size. A worker
// frees a burst of same-sized blocks when requests end (coroutine frames: Asio's own
// recycling keeps only a few; parsers' header fields; exchanges) and allocates a burst
// when the next ones start, so most of them went through malloc's slower bins. 64 per
// size absorbs the bursts: 5% less CPU per proxied request in an A/B run against nginx
// (docs/benchmarks.md). The cache holds at most 64 freed blocks per size class per
// thread, which is nothing next to a held stream's memory.
// The gateway's own build links tcmalloc (CMakeLists.txt), which needs none of this: its
// thread caches do more (docs/benchmarks.md, "Session 31").
#include "core/malloc_tuning.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

// gperftools' C interface, present when tcmalloc is linked (weak: null otherwise, as in
// the unit tests and the sanitizer builds).
extern "C" void MallocExtension_ReleaseFreeMemory() __attribute__((weak));

namespace tahua {

namespace {
constexpr const char* kTunables = "glibc.malloc.tcache_count=64";
bool tcmallocLinked() { return MallocExtension_ReleaseFreeMemory != nullptr; }
}  // namespace

void execWithMallocTuning(char** argv) {
#ifdef __SANITIZE_ADDRESS__
  // ASan's allocator replaces glibc's: the tunable would do nothing, and the exec doubles
  // the sanitizer build's start (0.8 s of loading and relocating a 300 MB binary).
  return;
#endif
  if (tcmallocLinked()) return;
  if (std::getenv("GLIBC_TUNABLES") || std::getenv("LD_PRELOAD")) return;
  if (const char* off = std::getenv("TAHUA_MALLOC_TUNING"); off && std::strcmp(off, "off") == 0) return;
  if (setenv("GLIBC_TUNABLES", kTunables, 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("GLIBC_TUNABLES");  // the exec failed: go on as we are
}

void releaseFreeMemory() {
  if (tcmallocLinked()) MallocExtension_ReleaseFreeMemory();
  else ::malloc_trim(0);
}

}  // namespace tahua
