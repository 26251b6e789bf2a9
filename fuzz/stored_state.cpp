// What tahua reads back from its stores, which another replica (or anyone with access to
// Redis) wrote: a kept cache entry (src/cache/response_cache.h) and a stored response
// (src/filters/responses/response_records.h); and the canonical JSON of a cache key.
//
// Input: one control byte (bits 0-1: which part; bits 2-3: the endpoint a hit asks for;
// bit 4: streamed), then the text.
// Beyond "no crash":
// - an entry that parses serializes back to one that parses to the same fields, and any
//   entry can be asked for in any form (decoded and re-encoded, or refused);
// - a record that parses serializes back to the same input, output and context, and a
//   request expands against it without crashing;
// - canonical JSON is deterministic, valid, and a fixed point (its text parsed and made
//   canonical again is itself) when its numbers are integers.
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include <boost/json.hpp>

#include "cache/response_cache.h"
#include "filters/cache/cache_key.h"
#include "filters/cache/cached_answer_forms.h"
#include "filters/responses/response_records.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tahua;
  namespace bj = boost::json;
  fuzz::Input in(data, size);
  const std::uint8_t control = in.byte();
  const std::string_view text = in.rest();
  switch (control & 3) {
    case 0: {
      auto a = CachedAnswer::parse(text);
      if (!a) return 0;
      auto b = CachedAnswer::parse(a->serialize());
      FUZZ_CHECK(b.has_value());
      FUZZ_CHECK(b->body == a->body && b->endpoint == a->endpoint && b->streamed == a->streamed &&
                 b->content_type == a->content_type && b->expires_ms == a->expires_ms && b->tenant == a->tenant);
      constexpr Endpoint kAsked[] = {Endpoint::ChatCompletions, Endpoint::Messages, Endpoint::Responses, Endpoint::Embeddings};
      InboundOptions options;
      options.model = "m";
      auto form = cachedAnswerAs(*a, kAsked[(control >> 2) & 3], (control & 0x10) != 0, true, options);
      if (form) FUZZ_CHECK(!form->content_type.empty());
      return 0;
    }
    case 1: {
      auto r = stored_responses::parseRecord(text);
      if (!r) return 0;
      auto again = stored_responses::parseRecord(stored_responses::serializeRecord(*r));
      FUZZ_CHECK(again.has_value());
      FUZZ_CHECK(again->input == r->input && again->context == r->context && again->response == r->response);
      // A request continuing it, and referring to its first items.
      std::map<std::string, stored_responses::Record, std::less<>> records;
      records.emplace(std::string(32, 'A'), *r);
      bj::object request{{"previous_response_id", "resp_" + std::string(32, 'A')},
                         {"input", bj::array{bj::object{{"type", "item_reference"}, {"id", "msg_" + std::string(32, 'A') + "o0"}},
                                             bj::object{{"type", "item_reference"}, {"id", "fc_" + std::string(32, 'A') + "i1"}}}}};
      auto wanted = stored_responses::wantedBy(request);
      auto expanded = stored_responses::expand(request, wanted, records, 8);
      (void)expanded;
      (void)stored_responses::inputItemsPage(*r, "limit=2&order=asc");
      return 0;
    }
    default: {
      boost::system::error_code ec;
      bj::value v = bj::parse(text, ec);
      if (ec) return 0;
      std::string canonical;
      canonicalJson(v, canonical);
      bj::value back = bj::parse(canonical, ec);
      FUZZ_CHECK(!ec);
      std::string again;
      canonicalJson(v, again);
      FUZZ_CHECK(again == canonical);  // deterministic
      // A fixed point, unless a number is a non-integral double: Boost.JSON 1.81 reads
      // some decimal texts one ulp off (no precise mode before 1.83), so a double's
      // shortest text may not read back to itself.
      std::function<bool(const bj::value&)> exact = [&](const bj::value& x) {
        if (x.is_double()) return std::trunc(x.get_double()) == x.get_double() && std::fabs(x.get_double()) < 9007199254740992.0;
        if (x.is_array())
          for (const auto& e : x.get_array())
            if (!exact(e)) return false;
        if (x.is_object())
          for (const auto& kv : x.get_object())
            if (!exact(kv.value())) return false;
        return true;
      };
      if (exact(v)) {
        std::string twice;
        canonicalJson(back, twice);
        FUZZ_CHECK(twice == canonical);
      }
      if (v.is_object()) (void)canonicalRequest(v.get_object(), (control & 4) != 0);
      return 0;
    }
  }
}
