// The gemini type (config/provider_kind.h): no settings of its own, Google's public
// endpoint by default.
#include "config/config.h"
#include "config/provider_kind.h"

namespace tahua {

namespace {
std::string defaultBaseUrl(const ProviderConfig&) { return "https://generativelanguage.googleapis.com/v1beta"; }
}  // namespace

extern const ProviderKind kGeminiKind{.type = "gemini", .default_base_url = defaultBaseUrl};

}  // namespace tahua
