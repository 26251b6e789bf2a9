// Reading a JSON document as deep as the gateway lets one nest. Boost.JSON's parse stops
// at 32 levels unless told otherwise: below what the router accepts in a request body
// (server.max_json_depth, 128 by default) and below what a model's tool arguments can
// nest in an answer. A reader that kept that default refused such a document as "not
// JSON" (a 400 for a translated request, a 502 for an answer whose tool input nests 33
// levels) or skipped it. Bodies, answers, events and stored documents are read here.
#pragma once

#include <cstddef>
#include <string_view>

#include <boost/json/fwd.hpp>
#include <boost/json/storage_ptr.hpp>
#include <boost/system/error_code.hpp>

namespace tahua {

// The deepest document any reader takes. server.max_json_depth goes up to 1,000 (the
// router refuses a body deeper than the configured bound with a precise 400 first), which
// leaves room for the levels a stored record wraps around a request body. Destroying a
// Boost.JSON value recurses once a level: 1,024 levels stay well inside a thread's stack,
// sanitizers included (10,000 overflow 1 MiB under ASan).
inline constexpr std::size_t kJsonReadDepth = 1'024;

boost::json::value readJson(std::string_view text, boost::system::error_code& ec, boost::json::storage_ptr sp = {});

}  // namespace tahua
