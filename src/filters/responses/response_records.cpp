#include "filters/responses/response_records.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <charconv>
#include <set>

#include "core/json_read.h"
#include "core/sha256.h"
#include "http/query.h"
#include "translate/response_ids.h"

namespace tahua::stored_responses {
namespace bj = boost::json;
namespace {

std::string_view strOf(const bj::object& o, std::string_view key) {
  const bj::value* v = o.if_contains(key);
  return v && v->is_string() ? std::string_view(v->get_string()) : std::string_view{};
}

// The id prefix OpenAI uses for an item of this type.
std::string_view itemPrefix(std::string_view type) {
  if (type == "message") return "msg";
  if (type == "function_call") return "fc";
  if (type == "function_call_output") return "fco";
  if (type == "reasoning") return "rs";
  return "item";
}

// An input item as a stored (and listed) item: a message's text as content parts.
bj::object normalizedItem(const bj::value& v) {
  bj::object item = v.is_object() ? v.get_object() : bj::object{};
  if (!item.contains("type")) item["type"] = "message";
  if (strOf(item, "type") == "message") {
    if (const bj::value* c = item.if_contains("content"); c && c->is_string()) {
      const bool assistant = strOf(item, "role") == "assistant";
      item["content"] = bj::array{bj::object{{"type", assistant ? "output_text" : "input_text"}, {"text", c->get_string()}}};
    }
  }
  return item;
}

// An item as it is sent upstream again: ids and statuses are the gateway's, not the
// model's (an OpenAI upstream would look them up).
bj::value resent(const bj::value& item) {
  if (!item.is_object()) return item;
  bj::object o = item.get_object();
  o.erase("id");
  o.erase("status");
  return o;
}

}  // namespace

std::string scopeOf(std::string_view tenant, std::string_view key) {
  std::string who(tenant);
  who += '\0';
  who.append(key);
  std::string hex = toHex(sha256(who));
  hex.resize(32);
  return hex;
}

std::string groupOf(std::string_view scope) {
  std::string g = "resp:";
  g.append(scope);
  return g;
}

std::string recordKey(std::string_view scope, std::string_view response_key) {
  std::string k = "tahua:kv:{resp:";
  k.append(scope).append("}:").append(response_key);
  return k;
}

std::optional<Record> parseRecord(std::string_view text) {
  boost::system::error_code ec;
  bj::value v = readJson(text, ec);
  if (ec || !v.is_object()) return std::nullopt;
  bj::object& o = v.get_object();
  bj::value* response = o.if_contains("response");
  bj::value* input = o.if_contains("input");
  if (!response || !response->is_object() || !input || !input->is_array()) return std::nullopt;
  Record r;
  r.response = std::move(response->get_object());
  r.input = std::move(input->get_array());
  if (const bj::value* c = o.if_contains("context"); c && c->is_array())
    for (const auto& k : c->get_array())
      if (k.is_string()) r.context.emplace_back(k.get_string());
  return r;
}

std::string serializeRecord(const Record& record) {
  bj::array context;
  for (const auto& k : record.context) context.emplace_back(k);
  return bj::serialize(bj::object{{"response", record.response}, {"input", record.input}, {"context", std::move(context)}});
}

Wanted wantedBy(const bj::object& request) {
  Wanted w;
  w.previous_id = std::string(strOf(request, "previous_response_id"));
  w.previous = std::string(responseKeyOf(w.previous_id));
  if (w.previous.empty()) w.previous_id.clear();  // not tahua's: left to the provider
  const bj::value* input = request.if_contains("input");
  if (!input || !input->is_array()) return w;
  std::set<std::string_view> seen;
  for (const auto& item : input->get_array()) {
    const bj::object* o = item.if_object();
    if (!o || strOf(*o, "type") != "item_reference") continue;
    if (auto ref = parseItemId(strOf(*o, "id")); ref && seen.insert(ref->response_key).second)
      w.items.emplace_back(ref->response_key);
  }
  return w;
}

std::variant<Expansion, Error> expand(bj::object& request, const Wanted& wanted,
                                      const std::map<std::string, Record, std::less<>>& records, std::size_t max_turns) {
  Expansion out;
  bj::array items;
  if (!wanted.previous.empty()) {
    auto prev = records.find(wanted.previous);
    if (prev == records.end())
      return Error{ErrorKind::PreviousResponseNotFound, "Previous response with id '" + wanted.previous_id + "' not found."};
    out.context = prev->second.context;
    out.context.push_back(wanted.previous);
    if (out.context.size() > max_turns)
      return Error{ErrorKind::InvalidRequest, "The conversation of previous_response_id '" + wanted.previous_id + "' has more than " +
                                                  std::to_string(max_turns) + " turns (responses.max_turns)."};
    for (const auto& key : out.context) {
      auto r = records.find(key);
      if (r == records.end())
        return Error{ErrorKind::PreviousResponseNotFound, "Previous response with id '" + wanted.previous_id +
                                                              "' cannot be continued: an earlier response of its conversation, '" +
                                                              responseIdFor(key) + "', no longer exists."};
      for (const auto& item : r->second.input) items.push_back(resent(item));
      if (const bj::value* output = r->second.response.if_contains("output"); output && output->is_array())
        for (const auto& item : output->get_array()) items.push_back(resent(item));
    }
  }
  out.prefix_items = items.size();
  bj::value* input = request.if_contains("input");
  if (input && input->is_string()) {
    items.push_back(bj::object{{"type", "message"}, {"role", "user"}, {"content", input->get_string()}});
  } else if (input && input->is_array()) {
    const bj::array& own = input->get_array();
    for (std::size_t i = 0; i < own.size(); ++i) {
      const bj::object* o = own[i].if_object();
      if (!o || strOf(*o, "type") != "item_reference") {
        items.push_back(own[i]);
        continue;
      }
      const std::string_view id = strOf(*o, "id");
      auto ref = parseItemId(id);
      if (!ref) {
        items.push_back(own[i]);  // not tahua's: the provider resolves it, or the codec says why not
        continue;
      }
      auto r = records.find(ref->response_key);
      const bj::value* found = nullptr;
      if (r != records.end()) {
        if (ref->output) {
          if (const bj::value* output = r->second.response.if_contains("output"); output && output->is_array() &&
                                                                               ref->index < output->get_array().size())
            found = &output->get_array()[ref->index];
        } else if (ref->index < r->second.input.size()) {
          found = &r->second.input[ref->index];
        }
      }
      if (!found) return Error{ErrorKind::ItemNotFound, "Item with id '" + std::string(id) + "' not found."};
      items.push_back(resent(*found));
    }
  } else if (!wanted.previous.empty()) {
    return Error{ErrorKind::InvalidRequest, "Parameter 'input' is required."};
  }
  if (!wanted.previous.empty()) request.erase("previous_response_id");
  request["input"] = std::move(items);
  return out;
}

std::optional<Record> makeRecord(bj::object response, const bj::object& request, std::size_t prefix_items,
                                 std::vector<std::string> context, std::string_view previous_id) {
  const std::string_view key = responseKeyOf(strOf(response, "id"));
  if (key.empty()) return std::nullopt;
  Record r;
  const bj::value* input = request.if_contains("input");
  if (input && input->is_string()) {
    r.input.push_back(normalizedItem(bj::object{{"type", "message"}, {"role", "user"}, {"content", input->get_string()}}));
  } else if (input && input->is_array()) {
    const bj::array& all = input->get_array();
    for (std::size_t i = std::min(prefix_items, all.size()); i < all.size(); ++i) r.input.push_back(normalizedItem(all[i]));
  }
  for (std::size_t i = 0; i < r.input.size(); ++i) {
    bj::object& item = r.input[i].as_object();
    if (!parseItemId(strOf(item, "id"))) item["id"] = itemIdFor(itemPrefix(strOf(item, "type")), key, false, i);
  }
  response["previous_response_id"] = previous_id.empty() ? bj::value(nullptr) : bj::value(previous_id);
  response["store"] = true;
  r.response = std::move(response);
  r.context = std::move(context);
  return r;
}

std::variant<std::string, Error> inputItemsPage(const Record& record, std::string_view query) {
  std::size_t limit = 20;
  if (auto v = queryParam(query, "limit")) {
    std::size_t n = 0;
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
    if (ec != std::errc{} || p != v->data() + v->size() || n < 1 || n > 100)
      return Error{ErrorKind::InvalidRequest, "Parameter 'limit' must be an integer from 1 to 100."};
    limit = n;
  }
  bool desc = true;
  if (auto v = queryParam(query, "order")) {
    if (*v != "asc" && *v != "desc") return Error{ErrorKind::InvalidRequest, "Parameter 'order' must be 'asc' or 'desc'."};
    desc = *v == "desc";
  }
  std::vector<const bj::value*> items;
  for (const auto& item : record.input) items.push_back(&item);
  if (desc) std::reverse(items.begin(), items.end());
  std::size_t start = 0;
  if (auto after = queryParam(query, "after")) {
    auto it = std::find_if(items.begin(), items.end(), [&](const bj::value* i) {
      return i->is_object() && strOf(i->get_object(), "id") == *after;
    });
    if (it == items.end()) return Error{ErrorKind::InvalidRequest, "Parameter 'after': no input item with id '" + std::string(*after) + "'."};
    start = static_cast<std::size_t>(it - items.begin()) + 1;
  }
  bj::array data;
  for (std::size_t i = start; i < items.size() && data.size() < limit; ++i) data.push_back(*items[i]);
  const bool more = start + data.size() < items.size();
  auto idOf = [](const bj::value& v) { return v.is_object() ? bj::value(strOf(v.get_object(), "id")) : bj::value(nullptr); };
  bj::value first = data.empty() ? bj::value(nullptr) : idOf(data.front());
  bj::value last = data.empty() ? bj::value(nullptr) : idOf(data.back());
  return bj::serialize(bj::object{{"object", "list"}, {"data", std::move(data)}, {"first_id", std::move(first)},
                                  {"last_id", std::move(last)}, {"has_more", more}});
}

}  // namespace tahua::stored_responses
