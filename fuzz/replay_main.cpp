// The CI side of the fuzz targets: a main() that runs every file in the given directories
// (or the given files) through LLVMFuzzerTestOneInput once, so the seed corpora and every
// crash ever found stay regression tests in the normal GCC build, without libFuzzer.
// A target signals a bug by crashing (a sanitizer report or FUZZ_CHECK's abort), so the
// exit status is the verdict; the file name goes to stderr first so a failure says which.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg = argv[i];
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      for (const auto& e : fs::recursive_directory_iterator(arg)) {
        // Dotfiles (.gitkeep holding an empty regressions folder) are not inputs.
        if (e.is_regular_file() && e.path().filename().string().front() != '.') files.push_back(e.path());
      }
    } else if (fs::is_regular_file(arg, ec)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "replay: %s: no such file or directory\n", argv[i]);
      return 2;
    }
  }
  // A wrong path in the test registration must not pass as "zero inputs, no crash".
  if (files.empty()) {
    std::fprintf(stderr, "replay: no inputs\n");
    return 2;
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "replay: cannot read %s\n", f.c_str());
      return 2;
    }
    const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::fprintf(stderr, "replay: %s\n", f.c_str());
    // Copied to a heap block of exactly its size, as libFuzzer does, so a read past
    // the end is caught by ASan in the sanitizer build.
    std::vector<std::uint8_t> data(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(data.data(), data.size());
  }
  std::printf("replay: %zu inputs, no failure\n", files.size());
  return 0;
}
