// Shared by the fuzz targets: reading the control bytes a target takes from the front
// of its input (which codec, where to split a stream, ...), and the check that turns a
// broken invariant into a crash libFuzzer reports (and the replay test fails on).
//
// Control bytes come first and are read with defaults when the input is short, so every
// input is valid and the rest of it is the payload the parser sees.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace tahua::fuzz {

class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : rest_(reinterpret_cast<const char*>(data), size) {}

  std::uint8_t byte() {
    if (rest_.empty()) return 0;
    const auto b = static_cast<std::uint8_t>(rest_.front());
    rest_.remove_prefix(1);
    return b;
  }
  std::uint16_t u16() {
    const std::uint16_t hi = byte();
    return static_cast<std::uint16_t>(hi << 8 | byte());
  }
  // What is left: the payload.
  std::string_view rest() const { return rest_; }

 private:
  std::string_view rest_;
};

// A split point in [0, size] chosen by the fuzzer, so incremental parsers see their input
// cut anywhere (mid-line, mid-header, mid-UTF-8), not only where a test author thought of.
inline std::size_t splitPoint(std::uint16_t choice, std::size_t size) { return size == 0 ? 0 : choice % (size + 1); }

[[noreturn]] inline void checkFailed(const char* what, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", file, line, what);
  std::abort();
}

}  // namespace tahua::fuzz

// Not assert(): the replay build is a Release build (NDEBUG), and the checks must hold there too.
#define FUZZ_CHECK(cond) \
  do { \
    if (!(cond)) ::tahua::fuzz::checkFailed(#cond, __FILE__, __LINE__); \
  } while (0)
