// glibc malloc tuning that glibc only reads at process start (GLIBC_TUNABLES).
#pragma once

namespace tahua {

// Sets GLIBC_TUNABLES for a larger per-thread cache and executes this program again,
// once, with the same arguments (same PID). Returns only when it did not: the operator
// set GLIBC_TUNABLES (theirs wins), a library is preloaded (heaptrack, valgrind, another
// malloc), TAHUA_MALLOC_TUNING=off, or the exec failed. Call first thing in main().
void execWithMallocTuning(char** argv);

}  // namespace tahua
