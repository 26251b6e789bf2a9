// Request inspection on a client's body (src/http/request_inspect.h): what routing reads
// from every request with simdjson's on-demand parser, and the in-place model rewrite.
//
// Input: one control byte (which replacement model name), then the body.
// Beyond "no crash": when a body is accepted, the model token it reports must lie inside
// the body and decode to the reported name; after rewriteModel, the body must differ only
// in that token and inspect again to the same facts with the new name.
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/json/parse.hpp>

#include "fuzz_input.h"
#include "http/request_inspect.h"

namespace {

// Names that need escaping, are empty, longer or shorter than the original, or not ASCII.
constexpr std::string_view kNewModels[] = {"gpt-4o", "", "a\"b\\c\n", "m\xC3\xA9t\xC3\xA9o", std::string_view("nul\0x", 5),
                                           "a-much-longer-upstream-model-name-than-any-client-sends-2024-08-06"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tahua;
  fuzz::Input in(data, size);
  const std::string_view new_model = kNewModels[in.byte() % std::size(kNewModels)];
  std::string body(in.rest());

  auto result = inspectRequest(body);
  auto* facts = std::get_if<RequestFacts>(&result);
  if (!facts) return 0;
  FUZZ_CHECK(!facts->model.empty());
  FUZZ_CHECK(facts->model_offset + facts->model_length <= body.size());
  const std::string_view token(body.data() + facts->model_offset, facts->model_length);
  // The token is the JSON string itself, quotes included: it must parse to the name.
  boost::system::error_code ec;
  const boost::json::value parsed = boost::json::parse(token, ec);
  FUZZ_CHECK(!ec && parsed.is_string());
  FUZZ_CHECK(std::string_view(parsed.get_string()) == facts->model);

  const std::string before = body;
  rewriteModel(body, *facts, new_model);
  const std::string_view head(before.data(), facts->model_offset);
  const std::string_view tail(before.data() + facts->model_offset + facts->model_length,
                              before.size() - facts->model_offset - facts->model_length);
  FUZZ_CHECK(body.size() >= head.size() + tail.size());
  FUZZ_CHECK(std::string_view(body).substr(0, head.size()) == head);
  FUZZ_CHECK(std::string_view(body).substr(body.size() - tail.size()) == tail);

  auto again = inspectRequest(body);
  if (new_model.empty()) {
    // An empty name is "no model": refused, the same way as a client sending "".
    FUZZ_CHECK(std::holds_alternative<Error>(again));
    return 0;
  }
  auto* facts2 = std::get_if<RequestFacts>(&again);
  FUZZ_CHECK(facts2 != nullptr);
  FUZZ_CHECK(facts2->model == new_model);
  FUZZ_CHECK(facts2->model_offset == facts->model_offset);
  FUZZ_CHECK(facts2->stream == facts->stream);
  FUZZ_CHECK(facts2->include_usage == facts->include_usage);
  return 0;
}
