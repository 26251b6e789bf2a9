// The in-process store's journal: records and quota consumption survive a restart, a
// torn last line is dropped, a damaged journal refuses to load; and the tenant
// directory's precedence between the config file and the store's records.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/sha256.h"
#include "store/journal.h"
#include "store/memory_store.h"
#include "tenants/tenant_directory.h"

namespace tahua {
namespace state_journal_test {  // named, not anonymous: eight test files compile as one unit

std::string tempPath(const char* name) {
  auto dir = std::filesystem::temp_directory_path() / ("tahua-journal-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto p = dir / name;
  std::filesystem::remove(p);
  return p.string();
}

void putSync(MemoryStore& s, std::string_view ns, std::string_view id, std::string json) {
  std::optional<std::string> err = "not called";
  s.putRecord(ns, id, std::move(json), [&](std::optional<std::string> e) { err = std::move(e); });
  ASSERT_FALSE(err) << *err;
}

TEST(StateJournal, RecordsAndQuotaConsumptionSurviveARestart) {
  const std::string path = tempPath("a.journal");
  const LimitCheck quota{"tahua:{t:a}:tenant:tpd", LimitSpec{LimitKind::Quota, 1000, 0, Calendar::Day}, 300};
  const std::int64_t now = 1'800'000'000'000;
  {
    MemoryStore s([&] { return now; });
    std::vector<std::string> warnings;
    std::string error;
    ASSERT_TRUE(s.openJournal(path, Millis(60'000), warnings, error)) << error;
    putSync(s, "keys", "k1", R"({"name":"k1"})");
    putSync(s, "keys", "k2", R"({"name":"k2"})");
    std::optional<std::string> err;
    s.eraseRecord("keys", "k1", [&](std::optional<std::string> e) { err = e; });
    s.admit(std::span<const LimitCheck>(&quota, 1), [](const Admission& a) { EXPECT_TRUE(a.allowed); });
  }  // the destructor flushes the quota
  MemoryStore s([&] { return now; });
  std::vector<std::string> warnings;
  std::string error;
  ASSERT_TRUE(s.openJournal(path, Millis(60'000), warnings, error)) << error;
  EXPECT_TRUE(warnings.empty());
  const auto keys = s.records("keys");
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys[0].id, "k2");
  EXPECT_EQ(s.peek(LimitCheck{quota.key, quota.spec, 0}).remaining, 700);  // the 300 consumed before the restart
  // Buckets and windows are not journaled: a fresh start.
  EXPECT_EQ(s.counters(), 1u);
}

TEST(StateJournal, TheRecordsGenerationMovesWithEveryChange) {
  MemoryStore s([] { return std::int64_t{1'800'000'000'000}; });
  const std::uint64_t start = s.recordsGeneration();
  putSync(s, "mcp_tools", "gh/a", R"({"fingerprint":"x"})");
  const std::uint64_t put = s.recordsGeneration();
  EXPECT_GT(put, start);
  s.eraseRecord("mcp_tools", "gh/a", [](std::optional<std::string>) {});
  EXPECT_GT(s.recordsGeneration(), put);
}

TEST(StateJournal, IdempotentAnswersSurviveARestartUntilTheyExpire) {
  const std::string path = tempPath("d.journal");
  std::int64_t now = 1'000;
  const std::string body("data: {\"x\":1}\n\n\x01\xff", 17);  // any bytes
  {
    MemoryStore s([&] { return now; });
    std::vector<std::string> warnings;
    std::string error;
    ASSERT_TRUE(s.openJournal(path, Millis(60'000), warnings, error)) << error;
    s.putIdempotent("k", {"fp", 200, "text/event-stream", body}, Millis(10'000));
  }
  MemoryStore s([&] { return now; });
  std::vector<std::string> warnings;
  std::string error;
  ASSERT_TRUE(s.openJournal(path, Millis(60'000), warnings, error)) << error;
  std::optional<StateStore::Idempotent> got;
  s.getIdempotent("k", [&](std::optional<StateStore::Idempotent> r) { got = std::move(r); });
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->body, body);
  EXPECT_EQ(got->content_type, "text/event-stream");
  now = 11'000;
  s.getIdempotent("k", [&](std::optional<StateStore::Idempotent> r) { got = std::move(r); });
  EXPECT_EQ(got->status, 0);
}

TEST(StateJournal, ATornLastLineIsDroppedAndADamagedOneRefused) {
  const std::string path = tempPath("b.journal");
  std::ofstream(path) << R"({"op":"put","ns":"keys","id":"k","doc":{"name":"k"}})" << "\n" << R"({"op":"put","ns":"ke)";
  {
    JournalState state;
    std::vector<std::string> warnings;
    std::string error;
    Journal j(path, state, warnings, error);
    EXPECT_EQ(error, "");
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("torn last line"), std::string::npos);
    EXPECT_EQ(state.records["keys"].size(), 1u);
  }
  std::ofstream(path) << "garbage\n" << R"({"op":"put","ns":"keys","id":"k","doc":{}})" << "\n";
  JournalState state;
  std::vector<std::string> warnings;
  std::string error;
  Journal j(path, state, warnings, error);
  EXPECT_NE(error.find(path + ":1: not a journal entry"), std::string::npos) << error;
}

TEST(StateJournal, CompactionKeepsOnlyTheLiveState) {
  const std::string path = tempPath("c.journal");
  JournalState state;
  std::vector<std::string> warnings;
  std::string error;
  Journal j(path, state, warnings, error);
  ASSERT_EQ(error, "");
  const std::string doc(200, 'x');
  for (int i = 0; i < 8000; ++i) {
    state.records["keys"]["k"] = "{\"v\":\"" + doc + "\"}";
    ASSERT_TRUE(j.append(Journal::putLine("keys", "k", state.records["keys"]["k"]), false));
  }
  EXPECT_GT(j.bytes(), 1024u * 1024);
  ASSERT_TRUE(j.compactIfLarge(state));
  EXPECT_LT(std::filesystem::file_size(path), 1024u);
  JournalState again;
  Journal reread(path, again, warnings, error);
  EXPECT_EQ(again.records["keys"]["k"], state.records["keys"]["k"]);
}

TEST(TenantDirectory, TheConfigFileWinsAndBadRecordsAreNotedNotFatal) {
  auto r = loadConfigString(R"(
listeners: [{port: 0}]
providers: [{name: mock, type: mock}]
models: [{name: m1, provider: mock}]
tenants: [{name: a}]
keys: [{name: ka, tenant: a, sha256: )" + toHex(sha256("sk-a")) + "}]\n",
                            "t.yaml");
  ASSERT_TRUE(r.config) << r.error;
  ApiKeyConfig k;
  k.name = "kb";
  k.tenant = "b";
  k.sha256 = sha256("sk-b");
  TenantConfig b;
  b.name = "b";
  TenantConfig shadow;
  shadow.name = "a";
  shadow.models = {"m1"};
  ApiKeyConfig orphan = k;
  orphan.name = "orphan";
  orphan.tenant = "gone";
  orphan.sha256 = sha256("sk-o");
  std::vector<std::string> notes;
  auto dir = buildTenantDirectory(*r.config, {{"b", tenantToJson(b)}, {"a", tenantToJson(shadow)}, {"x", "{bad"}},
                                  {{"kb", keyToJson(k)}, {"orphan", keyToJson(orphan)}}, notes);
  ASSERT_EQ(dir->tenants.size(), 2u);
  EXPECT_TRUE(dir->tenant("a")->models.empty()) << "the config's tenant a, not the record's";
  EXPECT_TRUE(dir->tenant("b")->from_store);
  ASSERT_TRUE(dir->key("kb"));
  EXPECT_EQ(dir->key("kb")->sha256, sha256("sk-b"));
  EXPECT_FALSE(dir->key("orphan"));
  EXPECT_EQ(notes.size(), 3u);  // the shadowed tenant, the bad record, the orphan key
}

TEST(TenantDirectory, KeyRecordsRoundTripWithoutTheSecret) {
  auto r = loadConfigString("listeners: [{port: 0}]\nproviders: [{name: mock, type: mock}]\nmodels: [{name: m1, provider: mock}]\n", "t");
  ASSERT_TRUE(r.config);
  ApiKeyConfig k;
  k.name = "ci";
  k.tenant = "t";
  k.sha256 = sha256("tk-secret-value");
  k.prefix = "tk-secret";
  k.models = {"m1"};
  k.expires_at = 1'900'000'000;
  k.limits.tokens_per_day = 5;
  k.limits.usd_per_month = 2.5;
  k.metadata = {{"owner", "ci"}};
  const std::string json = keyToJson(k);
  EXPECT_EQ(json.find("tk-secret-value"), std::string::npos);
  ApiKeyConfig back;
  ASSERT_FALSE(keyFromJson(json, *r.config, back, false));
  EXPECT_EQ(back.sha256, k.sha256);
  EXPECT_EQ(back.models, k.models);
  EXPECT_EQ(back.expires_at, k.expires_at);
  EXPECT_EQ(back.limits.tokens_per_day, 5);
  EXPECT_DOUBLE_EQ(back.limits.usd_per_month, 2.5);
  EXPECT_EQ(back.metadata, k.metadata);
  EXPECT_NE(*keyFromJson(R"({"name":"x","tenant":"t","models":["nope"]})", *r.config, back, false), "");
  EXPECT_NE(keyFromJson(R"({"limits":{"tokens_per_hour":1}})", *r.config, back, true)->find("limits.tokens_per_hour"), std::string::npos);
}

}  // namespace state_journal_test
}  // namespace tahua

namespace tahua {
namespace state_journal_test {

StateStore::ValueResult getSync(MemoryStore& s, std::string_view key) {
  StateStore::ValueResult out{StateStore::ValueResult::Status::Unavailable, "not called"};
  s.getValue(key, [&](StateStore::ValueResult r) { out = std::move(r); });
  return out;
}

TEST(StoreValues, KeptUntilTheirTtlErasedAndBoundedInSize) {
  std::int64_t now = 1'000;
  MemoryStore s([&] { return now; });
  using Status = StateStore::ValueResult::Status;
  EXPECT_EQ(getSync(s, "tahua:kv:p:a").status, Status::Missing);
  std::optional<std::string> err = "not called";
  s.putValue("tahua:kv:p:a", std::string("v\0w", 3), Millis(500), [&](std::optional<std::string> e) { err = std::move(e); });
  EXPECT_FALSE(err);
  auto got = getSync(s, "tahua:kv:p:a");
  EXPECT_EQ(got.status, Status::Found);
  EXPECT_EQ(got.value, std::string("v\0w", 3));
  now = 1'499;
  EXPECT_EQ(getSync(s, "tahua:kv:p:a").status, Status::Found);
  now = 1'500;
  EXPECT_EQ(getSync(s, "tahua:kv:p:a").status, Status::Missing) << "expired at its TTL";
  s.putValue("tahua:kv:p:b", "x", Millis(1'000), [](std::optional<std::string>) {});
  s.eraseValue("tahua:kv:p:b", [&](std::optional<std::string> e) { err = std::move(e); });
  EXPECT_FALSE(err);
  EXPECT_EQ(getSync(s, "tahua:kv:p:b").status, Status::Missing);
  // No lifetime, or too large: refused, never kept forever.
  s.putValue("tahua:kv:p:c", "x", Millis(0), [&](std::optional<std::string> e) { err = std::move(e); });
  EXPECT_TRUE(err);
  s.putValue("tahua:kv:p:c", std::string(StateStore::kMaxValueBytes + 1, 'x'), Millis(1'000), [&](std::optional<std::string> e) { err = std::move(e); });
  EXPECT_TRUE(err);
  EXPECT_EQ(getSync(s, "tahua:kv:p:c").status, Status::Missing);
}

TEST(StoreValues, SurviveARestartThroughTheJournalUntilTheyExpire) {
  const std::string path = tempPath("v.journal");
  std::int64_t now = 1'000;
  {
    MemoryStore s([&] { return now; });
    std::vector<std::string> warnings;
    std::string error;
    ASSERT_TRUE(s.openJournal(path, Millis(60'000), warnings, error)) << error;
    s.putValue("tahua:kv:p:long", std::string("\x01\xff", 2), Millis(10'000), [](std::optional<std::string>) {});
    s.putValue("tahua:kv:p:short", "s", Millis(100), [](std::optional<std::string>) {});
    s.putValue("tahua:kv:p:gone", "g", Millis(10'000), [](std::optional<std::string>) {});
    s.eraseValue("tahua:kv:p:gone", [](std::optional<std::string>) {});
  }
  now = 2'000;
  MemoryStore s([&] { return now; });
  std::vector<std::string> warnings;
  std::string error;
  ASSERT_TRUE(s.openJournal(path, Millis(60'000), warnings, error)) << error;
  using Status = StateStore::ValueResult::Status;
  const auto got = getSync(s, "tahua:kv:p:long");
  EXPECT_EQ(got.status, Status::Found);
  EXPECT_EQ(got.value, std::string("\x01\xff", 2));
  EXPECT_EQ(getSync(s, "tahua:kv:p:short").status, Status::Missing);
  EXPECT_EQ(getSync(s, "tahua:kv:p:gone").status, Status::Missing);
}

TEST(StoreValues, AGroupKeepsItsByteBoundOldestFirstAndItsOwnValuesOnly) {
  std::int64_t now = 1'000;
  MemoryStore s([&] { return now; });
  using Status = StateStore::ValueResult::Status;
  const std::string v(100, 'x');
  auto put = [&](std::string_view key, std::string_view group, std::size_t max) {
    std::optional<std::string> err = "not called";
    s.putGroupedValue(key, v, Millis(10'000), StateStore::ValueGroup{group, max}, [&](std::optional<std::string> e) { err = std::move(e); });
    EXPECT_FALSE(err);
  };
  // Each value counts its key (13 bytes) and its 100 bytes: 3 fit in 350.
  for (const char* k : {"tahua:kv:{a}:1", "tahua:kv:{a}:2", "tahua:kv:{a}:3"}) put(k, "a", 350);
  put("tahua:kv:{b}:1", "b", 350);
  for (const char* k : {"tahua:kv:{a}:1", "tahua:kv:{a}:2", "tahua:kv:{a}:3", "tahua:kv:{b}:1"})
    EXPECT_EQ(getSync(s, k).status, Status::Found) << k;
  put("tahua:kv:{a}:4", "a", 350);
  EXPECT_EQ(getSync(s, "tahua:kv:{a}:1").status, Status::Missing) << "the group's oldest went";
  for (const char* k : {"tahua:kv:{a}:2", "tahua:kv:{a}:3", "tahua:kv:{a}:4", "tahua:kv:{b}:1"})
    EXPECT_EQ(getSync(s, k).status, Status::Found) << k << ": another group's, or newer";
  // An erased value leaves room: the next put evicts nothing.
  s.eraseGroupedValue("tahua:kv:{a}:2", "a", [](std::optional<std::string>) {});
  put("tahua:kv:{a}:5", "a", 350);
  for (const char* k : {"tahua:kv:{a}:3", "tahua:kv:{a}:4", "tahua:kv:{a}:5"}) EXPECT_EQ(getSync(s, k).status, Status::Found) << k;
  // Expired values leave the count too.
  now = 20'000;
  for (int i = 0; i < 3; ++i) put("tahua:kv:{a}:n" + std::to_string(i), "a", 350);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(getSync(s, "tahua:kv:{a}:n" + std::to_string(i)).status, Status::Found);
  // A value larger than its group's bound is not kept.
  put("tahua:kv:{c}:big", "c", 50);
  EXPECT_EQ(getSync(s, "tahua:kv:{c}:big").status, Status::Missing);
}

TEST(StoreValues, AGroupsOrderSurvivesARestart) {
  const std::string path = tempPath("g.journal");
  std::int64_t now = 1'000;
  const std::string v(100, 'x');
  {
    MemoryStore s([&] { return now; });
    std::vector<std::string> warnings;
    std::string error;
    ASSERT_TRUE(s.openJournal(path, Millis(60'000), warnings, error)) << error;
    for (int i = 1; i <= 3; ++i) {
      now += 10;
      s.putGroupedValue("tahua:kv:{a}:" + std::to_string(i), v, Millis(10'000), StateStore::ValueGroup{"a", 350},
                        [](std::optional<std::string>) {});
    }
  }
  MemoryStore s([&] { return now; });
  std::vector<std::string> warnings;
  std::string error;
  ASSERT_TRUE(s.openJournal(path, Millis(60'000), warnings, error)) << error;
  s.putGroupedValue("tahua:kv:{a}:4", v, Millis(10'000), StateStore::ValueGroup{"a", 350}, [](std::optional<std::string>) {});
  using Status = StateStore::ValueResult::Status;
  EXPECT_EQ(getSync(s, "tahua:kv:{a}:1").status, Status::Missing) << "the oldest before the restart is still the oldest";
  for (const char* k : {"tahua:kv:{a}:2", "tahua:kv:{a}:3", "tahua:kv:{a}:4"}) EXPECT_EQ(getSync(s, k).status, Status::Found) << k;
}

}  // namespace state_journal_test
}  // namespace tahua

namespace tahua {
namespace state_journal_test {

// The in-process store's logs (the admin API's audit log): bounded to the newest `keep`,
// read newest first a page at a time from an id; an id not its own reads nothing.
TEST(StateStoreLog, KeepsTheNewestAndPagesBackFromAnId) {
  MemoryStore store;
  for (int i = 0; i < 7; ++i) store.appendLog("audit", "{\"n\":" + std::to_string(i) + "}", 5, [](auto e) { EXPECT_FALSE(e); });
  store.appendLog("other", "{}", 5, [](auto) {});
  StateStore::LogPage first, second, rest, bad;
  store.readLog("audit", "", 3, [&](StateStore::LogPage p) { first = std::move(p); });
  ASSERT_EQ(first.entries.size(), 3u);
  EXPECT_EQ(first.entries[0].json, "{\"n\":6}");
  EXPECT_EQ(first.entries[2].json, "{\"n\":4}");
  store.readLog("audit", first.entries.back().id, 3, [&](StateStore::LogPage p) { second = std::move(p); });
  ASSERT_EQ(second.entries.size(), 2u) << "only the newest 5 are kept";
  EXPECT_EQ(second.entries[1].json, "{\"n\":2}");
  store.readLog("audit", second.entries.back().id, 3, [&](StateStore::LogPage p) { rest = std::move(p); });
  EXPECT_TRUE(rest.entries.empty());
  store.readLog("audit", "12-x", 3, [&](StateStore::LogPage p) { bad = std::move(p); });
  EXPECT_TRUE(bad.entries.empty());
  EXPECT_FALSE(bad.error);
}

}  // namespace state_journal_test
}  // namespace tahua
