// Names threads as `top -H`, `ps -L`, perf and gdb show them.
#pragma once

#include <string_view>

namespace tahua {

// Names the calling thread (the kernel keeps 15 bytes; a longer name is cut). Threads a
// thread starts begin with its name, so the main thread's is the process's (`ps`, `pgrep`).
void nameThisThread(std::string_view name);

// The main thread after the program's file name (argv[0]'s last part): the exec of
// core/malloc_tuning.h runs `/proc/self/exe`, which would otherwise name it "exe".
void nameProcessAfter(const char* argv0);

}  // namespace tahua
