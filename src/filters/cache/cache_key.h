// The exact cache's key: a request body in canonical JSON in the manner of RFC 8785
// (object members sorted by name, no whitespace, numbers by value: 1, 1.0 and 1e0 are one
// number) without `model` (the model as served is part of the key instead), `stream`,
// `stream_options` and, unless configured, `user`. So key order and whitespace never
// matter, and a stream and a whole answer of the same request share an entry (two
// spellings of one non-integral number may still differ: Boost.JSON 1.81 reads a few
// decimal texts one ulp apart). An
// omitted parameter is not the same key as its explicit default: the gateway cannot know
// every provider's defaults.
#pragma once

#include <string>
#include <string_view>

#include <boost/json/value.hpp>

namespace tahua {

// Appends the canonical text of `v` to `out`.
void canonicalJson(const boost::json::value& v, std::string& out);

// The body without the members that do not change the answer (see above).
std::string canonicalRequest(const boost::json::object& body, bool keep_user);

// An entry's key in both layers: "tahua:cache:t<tenant>:k<key>:m<model>:<digest>", each
// name by the first 16 hex digits of its SHA-256 (the key is empty unless entries are per
// key), so a purge by tenant, key or model is a pattern over the keys. The digest covers
// the names too: isolation never rests on the short prefixes.
std::string cacheKey(std::string_view tenant, std::string_view api_key, std::string_view model, std::string_view digest);
// The 16 hex digits naming `text` in a key (cacheKey's parts).
std::string cacheNameHash(std::string_view text);
// The glob matching the entries of a tenant, key and model (an empty one: any).
std::string cacheKeyPattern(std::string_view tenant, std::string_view api_key, std::string_view model);

}  // namespace tahua
