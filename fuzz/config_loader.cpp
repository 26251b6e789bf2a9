// The config loader (src/config/config_loader.cpp): YAML text -> validated Config, through
// loadConfigString, the same path as a file (loadConfigFile reads the file and does the
// same). Configs are operator input, not network input, but a reload from a watched
// file or the admin API must fail with a message, never take the gateway down.
//
// Input: the YAML text.
// Checked beyond "no crash": the result is either a config or an error message, never
// neither or both.
#include <cstdint>
#include <string_view>

#include "config/config.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  const tahua::ConfigLoadResult result = tahua::loadConfigString(yaml, "fuzz.yaml");
  FUZZ_CHECK((result.config != nullptr) != !result.error.empty());
  return 0;
}
