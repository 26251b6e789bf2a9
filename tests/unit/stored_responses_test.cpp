// Stored responses' pure parts: the ids tahua issues, how a request that continues a
// stored conversation is expanded, the record of a new response, the input items page.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <set>

#include "filters/responses/response_records.h"
#include "translate/response_ids.h"

namespace tahua {
namespace stored_responses_test {  // named, not anonymous: eight test files compile as one unit

namespace bj = boost::json;
using namespace stored_responses;

TEST(ResponseIds, AreUniqueUnguessableAndTheirItemsNameThem) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = newResponseId();
    ASSERT_EQ(id.size(), 5 + kResponseKeyChars);
    ASSERT_EQ(responseKeyOf(id), id.substr(5));
    ASSERT_TRUE(seen.insert(id).second);
  }
  const std::string id = *seen.begin();
  const std::string item = itemIdFor("fc", responseKeyOf(id), true, 12);
  auto ref = parseItemId(item);
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->response_key, responseKeyOf(id));
  EXPECT_TRUE(ref->output);
  EXPECT_EQ(ref->index, 12u);
  EXPECT_FALSE(parseItemId(itemIdFor("msg", responseKeyOf(id), false, 3))->output);
  // OpenAI's own ids (and anything else) are not tahua's.
  EXPECT_TRUE(responseKeyOf("resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b").empty());
  EXPECT_FALSE(parseItemId("msg_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b"));
  EXPECT_FALSE(parseItemId(""));
  EXPECT_FALSE(parseItemId(item + "x"));
}

TEST(StoredResponses, ScopesDifferByTenantAndByKey) {
  EXPECT_NE(scopeOf("team-a", ""), scopeOf("team-b", ""));
  EXPECT_NE(scopeOf("team-a", ""), scopeOf("team-a", "k1"));
  EXPECT_NE(scopeOf("a", "b"), scopeOf("a\0b", ""));
  const std::string scope = scopeOf("team-a", "");
  EXPECT_NE(recordKey(scope, "R").find("{" + groupOf(scope) + "}"), std::string::npos) << "the group is the key's hash tag";
}

Record recordOf(const std::string& id, bj::array input, bj::array output, std::vector<std::string> context = {}) {
  Record r;
  r.response = bj::object{{"id", id}, {"object", "response"}, {"output", std::move(output)}};
  r.input = std::move(input);
  r.context = std::move(context);
  return r;
}

TEST(StoredResponses, PreviousResponseAndItemReferencesExpandIntoOneRequest) {
  const std::string id1 = newResponseId(), id2 = newResponseId();
  const std::string k1(responseKeyOf(id1)), k2(responseKeyOf(id2));
  std::map<std::string, Record, std::less<>> records;
  records[k1] = recordOf(id1, bj::array{bj::object{{"type", "message"}, {"id", itemIdFor("msg", k1, false, 0)}, {"role", "user"}, {"content", "one"}}},
                         bj::array{bj::object{{"type", "message"}, {"id", itemIdFor("msg", k1, true, 0)}, {"status", "completed"}, {"role", "assistant"}, {"content", "r1"}}});
  records[k2] = recordOf(id2, bj::array{bj::object{{"type", "message"}, {"role", "user"}, {"content", "two"}}},
                         bj::array{bj::object{{"type", "function_call"}, {"id", itemIdFor("fc", k2, true, 0)}, {"call_id", "c1"}, {"name", "f"}, {"arguments", "{}"}}},
                         {k1});
  bj::object req = bj::parse(R"({"model":"m","previous_response_id":")" + id2 +
                             R"(","input":[{"type":"function_call_output","call_id":"c1","output":"ok"}]})").as_object();
  Wanted w = wantedBy(req);
  EXPECT_EQ(w.previous, k2);
  auto e = expand(req, w, records, 10);
  ASSERT_TRUE(std::holds_alternative<Expansion>(e)) << std::get<Error>(e).message;
  EXPECT_EQ(std::get<Expansion>(e).prefix_items, 4u);
  EXPECT_EQ(std::get<Expansion>(e).context, (std::vector<std::string>{k1, k2}));
  EXPECT_FALSE(req.contains("previous_response_id"));
  const bj::array& in = req.at("input").as_array();
  ASSERT_EQ(in.size(), 5u);
  EXPECT_EQ(in[0].at("content"), "one");
  EXPECT_EQ(in[1].at("content"), "r1");
  EXPECT_FALSE(in[1].as_object().contains("id")) << "the gateway's ids are not sent upstream";
  EXPECT_FALSE(in[1].as_object().contains("status"));
  EXPECT_EQ(in[2].at("content"), "two");
  EXPECT_EQ(in[3].at("type"), "function_call");
  EXPECT_EQ(in[4].at("type"), "function_call_output");

  // An item_reference is replaced by its item; one tahua did not issue is left.
  bj::object req2 = bj::parse(R"({"input":[{"type":"item_reference","id":")" + itemIdFor("fc", k2, true, 0) +
                              R"("},{"type":"item_reference","id":"msg_openai123"}]})").as_object();
  Wanted w2 = wantedBy(req2);
  EXPECT_TRUE(w2.previous.empty());
  EXPECT_EQ(w2.items, std::vector<std::string>{k2});
  ASSERT_TRUE(std::holds_alternative<Expansion>(expand(req2, w2, records, 10)));
  EXPECT_EQ(req2.at("input").as_array()[0].at("call_id"), "c1");
  EXPECT_EQ(req2.at("input").as_array()[1].at("type"), "item_reference");
}

TEST(StoredResponses, WhatIsGoneIsNamedAndLongConversationsAreBounded) {
  const std::string id1 = newResponseId(), id2 = newResponseId();
  const std::string k1(responseKeyOf(id1)), k2(responseKeyOf(id2));
  std::map<std::string, Record, std::less<>> records;
  bj::object req = bj::parse(R"({"previous_response_id":")" + id1 + R"(","input":"hi"})").as_object();
  auto e = expand(req, wantedBy(req), records, 10);
  ASSERT_TRUE(std::holds_alternative<Error>(e));
  EXPECT_EQ(std::get<Error>(e).code(), "previous_response_not_found");
  EXPECT_NE(std::get<Error>(e).message.find(id1), std::string::npos);
  // An earlier turn of the conversation is gone.
  records[k2] = recordOf(id2, {}, {}, {k1});
  bj::object req2 = bj::parse(R"({"previous_response_id":")" + id2 + R"(","input":"hi"})").as_object();
  e = expand(req2, wantedBy(req2), records, 10);
  ASSERT_TRUE(std::holds_alternative<Error>(e));
  EXPECT_NE(std::get<Error>(e).message.find(id1), std::string::npos);
  // Too many turns.
  records[k1] = recordOf(id1, {}, {});
  e = expand(req2, wantedBy(req2), records, 1);
  ASSERT_TRUE(std::holds_alternative<Error>(e));
  EXPECT_EQ(std::get<Error>(e).code(), "invalid_request");
  // An item whose response is gone.
  bj::object req3 = bj::parse(R"({"input":[{"type":"item_reference","id":")" + itemIdFor("msg", k1, true, 5) + R"("}]})").as_object();
  e = expand(req3, wantedBy(req3), records, 10);
  ASSERT_TRUE(std::holds_alternative<Error>(e));
  EXPECT_EQ(std::get<Error>(e).code(), "item_not_found");
}

TEST(StoredResponses, ARecordKeepsItsOwnInputWithIdsAndListsItInPages) {
  const std::string id = newResponseId();
  const std::string key(responseKeyOf(id));
  bj::object response{{"id", id}, {"object", "response"}, {"output", bj::array{}}, {"previous_response_id", nullptr}};
  bj::object sent = bj::parse(R"({"input":[{"role":"user","content":"old"},{"role":"user","content":"a"},
      {"type":"message","role":"user","content":[{"type":"input_text","text":"b"}]},{"type":"function_call_output","call_id":"c","output":"x"}]})")
                        .as_object();
  auto rec = makeRecord(response, sent, 1, {"K0"}, "resp_prev");
  ASSERT_TRUE(rec);
  ASSERT_EQ(rec->input.size(), 3u);
  EXPECT_EQ(rec->input[0].at("id"), bj::value(itemIdFor("msg", key, false, 0)));
  EXPECT_EQ(rec->input[0].at("content").as_array()[0].at("type"), "input_text");
  EXPECT_EQ(rec->input[2].at("id"), bj::value(itemIdFor("fco", key, false, 2)));
  EXPECT_EQ(rec->response.at("previous_response_id"), "resp_prev");
  EXPECT_EQ(rec->context, std::vector<std::string>{"K0"});
  auto back = parseRecord(serializeRecord(*rec));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->input, rec->input);

  auto page = bj::parse(std::get<std::string>(inputItemsPage(*rec, "limit=2"))).as_object();
  EXPECT_EQ(page.at("object"), "list");
  ASSERT_EQ(page.at("data").as_array().size(), 2u);
  EXPECT_EQ(page.at("first_id"), bj::value(itemIdFor("fco", key, false, 2))) << "newest first by default";
  EXPECT_EQ(page.at("has_more"), true);
  auto next = bj::parse(std::get<std::string>(inputItemsPage(*rec, "limit=2&after=" + std::string(page.at("last_id").as_string())))).as_object();
  ASSERT_EQ(next.at("data").as_array().size(), 1u);
  EXPECT_EQ(next.at("has_more"), false);
  auto asc = bj::parse(std::get<std::string>(inputItemsPage(*rec, "order=asc"))).as_object();
  EXPECT_EQ(asc.at("first_id"), bj::value(itemIdFor("msg", key, false, 0)));
  EXPECT_TRUE(std::holds_alternative<Error>(inputItemsPage(*rec, "limit=0")));
  EXPECT_TRUE(std::holds_alternative<Error>(inputItemsPage(*rec, "order=up")));
  EXPECT_TRUE(std::holds_alternative<Error>(inputItemsPage(*rec, "after=nope")));
}

}  // namespace stored_responses_test
}  // namespace tahua
