// The allocator at start and after a config load: glibc's tuning (GLIBC_TUNABLES, read
// only at process start), or nothing to tune when the gateway is linked with tcmalloc.
#pragma once

namespace tahua {

// Sets GLIBC_TUNABLES for a larger per-thread cache and executes this program again,
// once, with the same arguments (same PID). Returns only when it did not: the binary
// uses tcmalloc (CMakeLists.txt, TAHUA_TCMALLOC), the operator set GLIBC_TUNABLES
// (theirs wins), a library is preloaded (heaptrack, valgrind, another malloc),
// TAHUA_MALLOC_TUNING=off, or the exec failed. Call first thing in main().
void execWithMallocTuning(char** argv);

// Gives the memory the allocator holds free back to the system (after parsing a large
// config): malloc_trim with glibc, tcmalloc's ReleaseFreeMemory with tcmalloc.
void releaseFreeMemory();

}  // namespace tahua
