// A tool call's arguments checked against the tool's inputSchema (JSON Schema, through
// valijson, Debian's libvalijson-dev) before the call leaves the gateway.
//
// What is checked: types, required and additional properties, enums and consts, numeric
// ranges, lengths, items, combinators (allOf, anyOf, oneOf, not, if/then/else), local
// $refs. What is left to the server: `pattern`, `patternProperties` and `format`, whose
// checks run std::regex over the caller's strings (a recursive matcher: a long string
// would exhaust the worker's stack); a level with patternProperties also drops its
// additionalProperties, so nothing the server would take is refused.
#pragma once

#include <boost/json/value.hpp>
#include <memory>
#include <string>

namespace tahua {

struct ArgumentSchema;  // a compiled schema

// Null when the schema cannot be compiled (a remote $ref, a keyword of the wrong
// shape): `error` says why, and calls to the tool go unchecked.
std::shared_ptr<const ArgumentSchema> compileArgumentSchema(const boost::json::value& schema, std::string& error);

// "" when `arguments` satisfy the schema; else the first problem, "<where>: <what>".
std::string checkArguments(const ArgumentSchema& schema, const boost::json::value& arguments);

}  // namespace tahua
