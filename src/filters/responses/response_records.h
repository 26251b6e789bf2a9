// A stored response as the state store keeps it, and the JSON work on it: pure functions
// (no store, no request context), unit-tested. One value per response:
//   {"response": {...}, "input": [...], "context": ["<R>", ...]}
// - response: the object as the client got it (ids tahua issued), previous_response_id
//   set to what the client sent;
// - input: the request's own input items (earlier turns excluded), each with an id;
// - context: the response keys (translate/response_ids.h) of the conversation before it,
//   oldest first: expanding previous_response_id costs two lookups however long it is.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "core/error.h"

namespace tahua::stored_responses {

// Whose responses: a hash of the tenant (and the key, when scoped by key), so one caller
// never finds another's, whatever id it tries.
std::string scopeOf(std::string_view tenant, std::string_view key);
// The store group of a scope (its byte bound) and a response's key in the store; the key
// carries the group as its hash tag (one Redis Cluster slot per scope).
std::string groupOf(std::string_view scope);
std::string recordKey(std::string_view scope, std::string_view response_key);

struct Record {
  boost::json::object response;
  boost::json::array input;
  std::vector<std::string> context;
};
std::optional<Record> parseRecord(std::string_view text);
std::string serializeRecord(const Record& record);

// The stored responses a request refers to: its previous_response_id's key, and the keys
// of the responses its item_references name (ids tahua issued only; others are left).
struct Wanted {
  std::string previous;            // response key, or empty
  std::string previous_id;         // as sent
  std::vector<std::string> items;  // distinct response keys
};
Wanted wantedBy(const boost::json::object& request);

// Rewrites `request` into one that stands alone: the conversation's items (every
// context response's input and output, then the previous one's) before its own input,
// each item_reference replaced by the item, previous_response_id removed. `records`
// holds every response wanted (and the previous one's context). Errors name what is
// missing. `prefix_items` is how many items came from earlier turns.
struct Expansion {
  std::size_t prefix_items = 0;
  std::vector<std::string> context;  // the new response's context (previous's + previous)
};
std::variant<Expansion, Error> expand(boost::json::object& request, const Wanted& wanted,
                                      const std::map<std::string, Record, std::less<>>& records, std::size_t max_turns);

// The record of a new response: `response` as the client got it, the request as sent
// upstream (its input from `prefix_items` on is its own), the expansion's context and the
// previous id the client sent. Input items get ids derived from the response's.
std::optional<Record> makeRecord(boost::json::object response, const boost::json::object& request, std::size_t prefix_items,
                                 std::vector<std::string> context, std::string_view previous_id);

// GET /v1/responses/{id}/input_items: OpenAI's list page (limit 1..100, default 20;
// order asc or desc, default desc; after: an item id). An Error for a bad parameter.
std::variant<std::string, Error> inputItemsPage(const Record& record, std::string_view query);

}  // namespace tahua::stored_responses
