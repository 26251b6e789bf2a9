// A bearer token or a JWKS document from the network (src/identity/jwt_verifier.cpp):
// any bytes are refused with a Failure or parsed. The first byte picks which parser.
// Checked beyond "no crash": a parsed token's signing input is its first two segments
// and its claims an object; an unparsed one is Malformed, TooLarge or UnsupportedAlg;
// a JWKS never yields more than kMaxKeys keys, and a token verified against it either
// fails with a reason or used one of its keys.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_input.h"
#include "identity/jwt_verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tahua;
  fuzz::Input in(data, size);
  const std::uint8_t mode = in.byte();
  const std::string_view text = in.rest();
  if (mode & 1) {
    std::string error;
    auto keys = jwt::KeySet::parse(text, nullptr, error);
    FUZZ_CHECK(keys || !error.empty());
    if (keys) FUZZ_CHECK(keys->size() <= jwt::kMaxKeys);
    return 0;
  }
  jwt::Token t;
  const auto failure = jwt::parse(text, t);
  if (failure) {
    FUZZ_CHECK(*failure == jwt::Failure::Malformed || *failure == jwt::Failure::TooLarge ||
               *failure == jwt::Failure::UnsupportedAlg);
    return 0;
  }
  FUZZ_CHECK(t.claims.is_object());
  FUZZ_CHECK(text.substr(0, t.signing_input.size()) == t.signing_input);
  FUZZ_CHECK(text.size() > t.signing_input.size() && text[t.signing_input.size()] == '.');
  const std::string audiences[] = {"tahua"};
  const jwt::Key* used = nullptr;
  auto empty = jwt::KeySet::of({});
  FUZZ_CHECK(jwt::verify(t, *empty, jwt::Policy{"https://idp.example", audiences, 60, 1'900'000'000}, &used) ==
             jwt::Failure::UnknownKey);
  FUZZ_CHECK(!used);
  return 0;
}
