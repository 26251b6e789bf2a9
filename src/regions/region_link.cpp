#include "regions/region_link.h"

#include <unistd.h>

#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <string_view>

#include "core/log.h"
#include "core/sha256.h"
#include "store/redis/region_scripts.h"
#include "store/redis/blocking_redis.h"
#include "core/redis_url.h"
#include "core/thread_name.h"

namespace tahua {

namespace {

// The namespaces every region shares; node reports and registered endpoints stay regional.
constexpr std::string_view kShared[] = {"tenants", "keys", "resources"};
constexpr std::size_t kBatch = 256;  // records or counters per script call

std::int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A command's reply, with a Redis error reply counted as a failure (`error` says it).
std::optional<RedisReply> ask(BlockingRedis& redis, const std::vector<std::string>& args, std::string& error) {
  auto r = redis.call(args, error);
  if (r && r->isError()) {
    error = r->str;
    return std::nullopt;
  }
  return r;
}

std::string metaKey(std::string_view ns) { return "tahua:region:meta:" + std::string(ns); }
std::string versionKey(std::string_view ns) { return "tahua:region:ver:" + std::string(ns); }
// Records written past the store (a hand-written HSET) are looked for this often (in
// cycles): the store's own writes carry their time already.
constexpr std::uint64_t kDetectEvery = 10;
std::string recordsKey(std::string_view ns) { return "tahua:records:" + std::string(ns); }
constexpr const char* kClock = "tahua:region:hlc";
std::string peersKey(const std::string& counter) { return "tahua:region:q:" + counter; }

// A quota counter's calendar from its name (limits/limit_plan.cpp's suffixes); nullopt: not a quota.
std::optional<int> quotaCalendar(std::string_view key) {
  const auto ends = [&](std::string_view s) { return key.size() > s.size() && key.substr(key.size() - s.size()) == s; };
  if (ends(":tpd") || ends(":usdd")) return 0;
  if (ends(":tpmo") || ends(":usdm")) return 1;
  return std::nullopt;
}

// "<hlc> <origin> <del> <sha>": the parts newer() compares, and whether it is a deletion.
struct Meta {
  std::string ts, origin;
  bool deleted = false;
  std::string sha;
};
std::optional<Meta> parseMeta(std::string_view e) {
  const auto a = e.find(' ');
  const auto b = a == std::string_view::npos ? a : e.find(' ', a + 1);
  if (b == std::string_view::npos || b + 3 >= e.size() || e[b + 2] != ' ') return std::nullopt;
  return Meta{std::string(e.substr(0, a)), std::string(e.substr(a + 1, b - a - 1)), e[b + 1] == '1', std::string(e.substr(b + 3))};
}

bool newer(const Meta& a, const std::optional<Meta>& b) {
  if (!b) return true;
  return a.ts != b->ts ? a.ts > b->ts : a.origin > b->origin;
}

std::map<std::string, std::string> hashOf(const RedisReply& r) {
  std::map<std::string, std::string> out;
  if (r.type != RedisReply::Type::Array) return out;
  for (std::size_t i = 0; i + 1 < r.elements.size(); i += 2) out[r.elements[i].str] = r.elements[i + 1].str;
  return out;
}

}  // namespace

struct RegionLink::Impl {
  struct Peer {
    Peer(RedisEndpoint ep, Millis timeout) : conn(std::move(ep), timeout) {}
    BlockingRedis conn;
    std::map<std::string, std::string> usage_sent;  // counter -> "period used" it has from here
    // ns -> (its version, ours) when it last had everything of ours: both unchanged, skip.
    std::map<std::string, std::pair<std::string, std::string>, std::less<>> synced;
    void forget() {
      conn.close();
      usage_sent.clear();
      synced.clear();
    }
  };
  std::unique_ptr<BlockingRedis> local;
  std::vector<std::unique_ptr<Peer>> peers;
  std::string owner;
  std::uint64_t cycle = 0;
  // ns -> (version, entries) of this region's meta as last read.
  std::map<std::string, std::pair<std::string, std::map<std::string, std::string>>, std::less<>> meta;
};

RegionLink::RegionLink(RegionConfig region, RedisStoreConfig store)
    : region_(std::move(region)), store_(std::move(store)), impl_(std::make_unique<Impl>()) {
  RedisEndpoint local;
  parseRedisUrl(store_.url, local);  // checked by the config loader
  useCredentials(store_.auth, local);
  impl_->local = std::make_unique<BlockingRedis>(local, std::max(store_.command_timeout, region_.timeout));
  for (const auto& p : region_.peers) {
    RedisEndpoint ep;
    parseRedisUrl(p.url, ep);
    useCredentials(p.auth, ep);
    impl_->peers.push_back(std::make_unique<Impl::Peer>(std::move(ep), region_.timeout));
    auto s = std::make_unique<PeerStats>();
    s->name = p.name;
    stats_.push_back(std::move(s));
  }
  impl_->owner = region_.name + "-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}());
}

RegionLink::~RegionLink() { stop(); }

void RegionLink::start() {
  thread_ = std::thread([this] {
    nameThisThread("tahua-region");
    run();
  });
}

void RegionLink::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RegionLink::run() {
  BlockingRedis& local = *impl_->local;
  std::string error, last_local_error;
  const auto localCall = [&](const std::vector<std::string>& args) { return ask(local, args, error); };
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (wake_.wait_for(lock, region_.interval, [this] { return stopping_; })) break;
    }
    // Only the lock's holder pushes: the others stand by to take over within 3 intervals.
    auto held = localCall({"EVAL", region_scripts::kHold, "1", "tahua:lock:region-link", impl_->owner,
                           std::to_string(3 * region_.interval.count())});
    const bool leading = held && held->integer == 1;
    if (leading != leader_.exchange(leading))
      log::info(leading ? "region link: this replica pushes for the region" : "region link: another replica pushes for the region",
                {{"region", region_.name}});
    if (!held) {
      if (error != last_local_error) log::warn("region link: this region's Redis does not answer", {{"error", error}});
      last_local_error = error;
      for (auto& s : stats_) s->up = false;
      continue;
    }
    last_local_error.clear();
    if (!leading) {
      for (auto& s : stats_) s->up = false;
      continue;
    }
    // 1. Records written past the store get their time; the entries are read again when
    //    their version moved.
    bool ok = true;
    const bool detect = impl_->cycle++ % kDetectEvery == 0;
    auto& meta = impl_->meta;
    for (std::string_view ns : kShared) {
      if (detect)
        ok = ok && localCall({"EVAL", region_scripts::kDetect, "4", recordsKey(ns), metaKey(ns), kClock, versionKey(ns), region_.name});
      auto version = ok ? localCall({"GET", versionKey(ns)}) : std::nullopt;
      ok = ok && version;
      if (!ok) break;
      auto& cached = meta[std::string(ns)];
      if (cached.first == version->str && !version->str.empty()) continue;
      auto m = localCall({"HGETALL", metaKey(ns)});
      ok = ok && m;
      if (ok) cached = {version->str, hashOf(*m)};
    }
    if (!ok) meta.clear();
    // 2. This region's use of every quota counter.
    std::map<std::string, std::pair<std::string, int>> usage;  // counter -> ("period used", calendar)
    std::vector<std::string> counters;
    for (std::string cursor = "0"; ok;) {
      auto page = localCall({"SCAN", cursor, "MATCH", "tahua:{*", "COUNT", "1000"});
      if (!page || page->elements.size() != 2) {
        ok = false;
        break;
      }
      for (const auto& k : page->elements[1].elements)
        if (quotaCalendar(k.str)) counters.push_back(k.str);
      cursor = page->elements[0].str;
      if (cursor == "0") break;
    }
    for (std::size_t i = 0; ok && i < counters.size(); i += kBatch) {
      const std::size_t n = std::min(kBatch, counters.size() - i);
      std::vector<std::string> args{"EVAL", region_scripts::kOwnUsage, std::to_string(2 * n)};
      for (std::size_t j = i; j < i + n; ++j) {
        args.push_back(counters[j]);
        args.push_back(peersKey(counters[j]));
      }
      args.push_back(region_.name);
      auto r = localCall(args);
      if (!r || r->elements.size() != 2 * n) {
        ok = false;
        break;
      }
      for (std::size_t j = 0; j < n; ++j) {
        const long long period = r->elements[2 * j].integer, used = r->elements[2 * j + 1].integer;
        if (period >= 0) usage[counters[i + j]] = {std::to_string(period) + " " + std::to_string(used), *quotaCalendar(counters[i + j])};
      }
    }
    if (!ok) {
      log::warn("region link: cannot read this region's records or counters", {{"error", error}});
      continue;
    }
    // 3. Each peer gets what it does not have.
    for (std::size_t p = 0; p < impl_->peers.size(); ++p) {
      Impl::Peer& peer = *impl_->peers[p];
      PeerStats& st = *stats_[p];
      std::string perr;
      bool pok = true;
      const auto peerCall = [&](const std::vector<std::string>& args) { return ask(peer.conn, args, perr); };
      std::uint64_t records = 0, reports = 0;
      for (auto& [ns, ours] : meta) {
        auto& [our_version, mine] = ours;
        auto their_version = peerCall({"GET", versionKey(ns)});
        if (!their_version) {
          pok = false;
          break;
        }
        auto synced = peer.synced.find(ns);
        if (synced != peer.synced.end() && synced->second == std::pair{their_version->str, our_version}) continue;
        auto theirs = peerCall({"HGETALL", metaKey(ns)});
        if (!theirs) {
          pok = false;
          break;
        }
        const auto other = hashOf(*theirs);
        std::vector<std::string> ids;
        for (const auto& [id, e] : mine) {
          auto m = parseMeta(e);
          auto it = other.find(id);
          if (m && newer(*m, it == other.end() ? std::nullopt : parseMeta(it->second))) ids.push_back(id);
        }
        for (std::size_t i = 0; pok && i < ids.size(); i += kBatch) {
          const std::size_t n = std::min(kBatch, ids.size() - i);
          std::vector<std::string> get{"HMGET", recordsKey(ns)};
          for (std::size_t j = i; j < i + n; ++j) get.push_back(ids[j]);
          auto values = localCall(get);
          if (!values || values->elements.size() != n) {
            pok = false;
            perr = "this region's records: " + error;
            break;
          }
          std::vector<std::string> args{"EVAL", region_scripts::kApply, "4", recordsKey(ns), metaKey(ns), kClock, versionKey(ns), ns, region_.name};
          for (std::size_t j = 0; j < n; ++j) {
            const std::string& e = mine[ids[i + j]];
            const bool deleted = parseMeta(e)->deleted;  // ids holds parseable entries only
            // Written again here since step 1 (the value is not the one the entry describes):
            // its new entry goes next cycle.
            if (!deleted && (values->elements[j].type != RedisReply::Type::String ||
                             parseMeta(e)->sha != sha1Hex(values->elements[j].str)))
              continue;
            args.push_back(ids[i + j]);
            args.push_back(e);
            args.push_back(deleted ? std::string() : values->elements[j].str);
          }
          auto r = peerCall(args);
          if (!r) pok = false;
          else records += static_cast<std::uint64_t>(r->integer);
        }
        if (!pok) break;
        // Its version after what it took from us: unchanged next time means nothing new there.
        auto after = peerCall({"GET", versionKey(ns)});
        if (!after) {
          pok = false;
          break;
        }
        // Entries skipped above (written again here meanwhile) come with our next version.
        peer.synced[ns] = {after->str, our_version};
      }
      // Quota use: only what changed since it was last taken.
      std::vector<std::pair<const std::string*, const std::pair<std::string, int>*>> changed;
      for (const auto& [counter, u] : usage) {
        auto it = peer.usage_sent.find(counter);
        if (it == peer.usage_sent.end() || it->second != u.first) changed.emplace_back(&counter, &u);
      }
      for (std::size_t i = 0; pok && i < changed.size(); i += kBatch) {
        const std::size_t n = std::min(kBatch, changed.size() - i);
        std::vector<std::string> args{"EVAL", region_scripts::kApplyUsage, std::to_string(2 * n)};
        for (std::size_t j = i; j < i + n; ++j) {
          args.push_back(*changed[j].first);
          args.push_back(peersKey(*changed[j].first));
        }
        args.push_back(region_.name);
        for (std::size_t j = i; j < i + n; ++j) {
          const std::string& pu = changed[j].second->first;
          const auto sp = pu.find(' ');
          args.push_back(pu.substr(0, sp));
          args.push_back(pu.substr(sp + 1));
          args.push_back(std::to_string(changed[j].second->second));
        }
        if (!peerCall(args)) {
          pok = false;
          break;
        }
        for (std::size_t j = i; j < i + n; ++j) peer.usage_sent[*changed[j].first] = changed[j].second->first;
        reports += n;
      }
      st.records_pushed += records;
      st.usage_pushed += reports;
      if (!pok) {
        if (st.up.exchange(false) || st.errors == 0)
          log::warn("region link: the peer region is unreachable; requests go on with what is known", {{"peer", st.name}, {"error", perr}});
        ++st.errors;
        peer.forget();  // everything again once it answers
        continue;
      }
      if (!st.up.exchange(true)) log::info("region link: the peer region is reachable", {{"peer", st.name}});
      st.last_sync_ms = nowMs();
    }
  }
  leader_ = false;
}

}  // namespace tahua
