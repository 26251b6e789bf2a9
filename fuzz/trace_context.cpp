// The W3C traceparent header a client sends (src/telemetry/trace_context.cpp): any bytes
// are either refused or parsed into ids that format back to the same header.
// Checked beyond "no crash": an accepted value has non-zero ids, and a version-00 value
// with flags 00 or 01 formats back (with its parent as the span) byte for byte.
#include <cstdint>
#include <string_view>

#include "fuzz_input.h"
#include "telemetry/trace_context.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tahua;
  const std::string_view value(reinterpret_cast<const char*>(data), size);
  TraceContext t;
  if (!parseTraceparent(value, t)) return 0;
  FUZZ_CHECK(t.valid());
  FUZZ_CHECK(value.size() >= 55);
  char out[55];
  formatTraceparent(t, t.parent_id, out);
  if (value.substr(0, 2) == "00" && (value.substr(53, 2) == "00" || value.substr(53, 2) == "01"))
    FUZZ_CHECK(std::string_view(out, 55) == value);
  return 0;
}
