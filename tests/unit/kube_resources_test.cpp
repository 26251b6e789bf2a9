// The Kubernetes API's answers as tahua reads them: a list (its resourceVersion and each
// object's name and spec), and watch lines (ADDED / MODIFIED / DELETED / BOOKMARK, and
// ERROR with the Status's code, 410 meaning "list again"); anything else is refused
// with a reason, never applied half-read.
#include "kubernetes/resource_watch.h"

#include <gtest/gtest.h>

namespace tahua {
namespace kube_resources_test {  // named, not anonymous: eight test files compile as one unit

TEST(KubeList, TakesTheVersionAndEachObjectsNameAndSpec) {
  std::string error;
  auto list = parseKubeList(R"({"apiVersion":"tahua.dev/v1","kind":"ModelRouteList","metadata":{"resourceVersion":"812"},
    "items":[{"metadata":{"name":"auto","resourceVersion":"800"},"spec":{"match":{"model":"auto"},"target":"small"}},
             {"kind":"ModelRoute","metadata":{"name":"nospec"}}]})",
                            "ModelRoute", error);
  ASSERT_TRUE(list) << error;
  EXPECT_EQ(list->resource_version, "812");
  ASSERT_EQ(list->items.size(), 2u);
  EXPECT_EQ(list->items[0].name, "auto");
  EXPECT_EQ(list->items[0].spec, R"({"match":{"model":"auto"},"target":"small"})");
  EXPECT_EQ(list->items[1].spec, "null");  // applied as invalid, which names it
  auto empty = parseKubeList(R"({"metadata":{"resourceVersion":"1"},"items":null})", "ModelRoute", error);
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->items.empty());
}

TEST(KubeList, RefusesWhatIsNotAListOfTheKind) {
  std::string error;
  EXPECT_FALSE(parseKubeList("<html>", "ModelRoute", error));
  EXPECT_EQ(error, "the list is not a JSON object");
  EXPECT_FALSE(parseKubeList(R"({"items":[]})", "ModelRoute", error));
  EXPECT_EQ(error, "the list has no metadata.resourceVersion");
  EXPECT_FALSE(parseKubeList(R"({"metadata":{"resourceVersion":"1"},"items":{}})", "ModelRoute", error));
  EXPECT_EQ(error, "the list's items are not an array");
  EXPECT_FALSE(parseKubeList(R"({"metadata":{"resourceVersion":"1"},"items":[{"kind":"Plugin","metadata":{"name":"x"}}]})",
                             "ModelRoute", error));
  EXPECT_EQ(error, "an object of kind \"Plugin\" where ModelRoute was expected");
  EXPECT_FALSE(parseKubeList(R"({"metadata":{"resourceVersion":"1"},"items":[{"metadata":{}}]})", "ModelRoute", error));
  EXPECT_EQ(error, "an object without metadata.name");
}

TEST(KubeEvent, ReadsEachTypeOfWatchLine) {
  std::string error;
  auto added = parseKubeEvent(
      R"({"type":"ADDED","object":{"kind":"ModelRoute","metadata":{"name":"a","resourceVersion":"9"},"spec":{"target":"x"}}})",
      "ModelRoute", error);
  ASSERT_TRUE(added) << error;
  EXPECT_EQ(added->type, KubeEvent::Type::Added);
  EXPECT_EQ(added->object.name, "a");
  EXPECT_EQ(added->object.resource_version, "9");
  EXPECT_EQ(added->object.spec, R"({"target":"x"})");
  auto deleted = parseKubeEvent(R"({"type":"DELETED","object":{"metadata":{"name":"a","resourceVersion":"10"},"spec":{}}})",
                                "ModelRoute", error);
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->type, KubeEvent::Type::Deleted);
  auto bookmark = parseKubeEvent(R"({"type":"BOOKMARK","object":{"kind":"ModelRoute","metadata":{"resourceVersion":"12"}}})",
                                 "ModelRoute", error);
  ASSERT_TRUE(bookmark) << error;
  EXPECT_EQ(bookmark->type, KubeEvent::Type::Bookmark);
  EXPECT_EQ(bookmark->object.resource_version, "12");
  auto gone = parseKubeEvent(
      R"js({"type":"ERROR","object":{"kind":"Status","status":"Failure","message":"too old resource version: 5 (9)","reason":"Expired","code":410}})js",
      "ModelRoute", error);
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->type, KubeEvent::Type::Error);
  EXPECT_EQ(gone->code, 410);
  EXPECT_EQ(gone->message, "too old resource version: 5 (9)");
}

TEST(KubeEvent, RefusesWhatIsNotAnEvent) {
  std::string error;
  EXPECT_FALSE(parseKubeEvent("{\"type\":\"ADDED\"", "ModelRoute", error));
  EXPECT_EQ(error, "a watch line is not a JSON object");
  EXPECT_FALSE(parseKubeEvent(R"({"type":"ADDED"})", "ModelRoute", error));
  EXPECT_EQ(error, "a watch event without an object");
  EXPECT_FALSE(parseKubeEvent(R"({"type":"SYNC","object":{"metadata":{"name":"a"}}})", "ModelRoute", error));
  EXPECT_EQ(error, "a watch event of type \"SYNC\"");
  EXPECT_FALSE(parseKubeEvent(R"({"type":"MODIFIED","object":{"metadata":{"resourceVersion":"3"}}})", "ModelRoute", error));
  EXPECT_EQ(error, "an object without metadata.name");
}

}  // namespace kube_resources_test
}  // namespace tahua
