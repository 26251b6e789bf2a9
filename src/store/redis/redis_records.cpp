// The Redis store's records (admin-created tenants and keys: a mirror in memory, kept
// current by pub/sub and resync), idempotency answers and locks.
#include "store/redis/redis_store.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>

#include "core/json_read.h"
#include "core/log.h"
#include "store/redis/redis_connection.h"
#include "store/redis/redis_detail.h"
#include "store/redis/redis_scripts.h"
#include "store/redis/region_scripts.h"
#include <boost/json.hpp>

#include "core/base64.h"

namespace tahua {
namespace asio = boost::asio;
using namespace redis_detail;

void RedisStore::subscribe() {
  // Lost: writes go unheard from now on, so the filter is distrusted at once (not at the
  // next heartbeat), and a scan still running cannot make it trusted again.
  subscriber_->onDown([this] {
    if (!ids_) return;
    ++ids_epoch_;
    ids_->distrust();
  });
  subscriber_->onPush([this](const RedisReply& r) {
    if (r.type != RedisReply::Type::Array || r.elements.size() != 3 || r.elements[0].str != "message") return;
    // ["message", "tahua:values", key]: a value was written (here or by another replica).
    if (r.elements[1].str == kValuesChannel) {
      if (ids_) ids_->add(r.elements[2].str);
      return;
    }
    // ["message", "tahua:changes", ns]: another replica (or this one) changed records of `ns`.
    reloadRecords(r.elements[2].str, true, {});
  });
  subscriber_->send({"SUBSCRIBE", kChangesChannel, kValuesChannel}, [this](std::optional<RedisReply> r) {
    // Subscribed: from now on every write is heard, so a scan now sees all the others.
    if (ids_ && r && !r->isError()) rebuildIds();
  });
}

void RedisStore::filterLookups(const LookupFilterConfig& config) {
  if (!config.enabled || !config_.cluster_nodes.empty()) return;
  ids_ = std::make_unique<IdFilter>(config.expected_ids, config.false_positive_rate, config.negative_ttl);
}

void RedisStore::rebuildIds() {
  const std::uint64_t epoch = ++ids_epoch_;
  ids_->startRebuild();
  scanIds("0", epoch, 0);
}

void RedisStore::scanIds(std::string cursor, std::uint64_t epoch, unsigned pages) {
  constexpr unsigned kMaxPages = 100'000;  // 100 M keys at 1,000 a page
  const std::string match = std::string(kValuePrefix) + "*";
  control_->send({"SCAN", cursor, "MATCH", match, "COUNT", "1000"}, [this, epoch, pages](std::optional<RedisReply> r) {
    if (epoch != ids_epoch_.load()) return;  // a newer rebuild took over
    const bool page = r && r->type == RedisReply::Type::Array && r->elements.size() == 2 &&
                      r->elements[0].type == RedisReply::Type::String && r->elements[1].type == RedisReply::Type::Array;
    if (!page || pages >= kMaxPages) {
      // Not trusted; the next (re)subscription or capacity check rebuilds it.
      log::warn("redis store: the lookup filter could not be built; lookups ask Redis", {{"error", control_->lastError()}});
      return;
    }
    for (const auto& key : r->elements[1].elements)
      if (key.type == RedisReply::Type::String) ids_->add(key.str);
    if (r->elements[0].str != "0") {
      scanIds(r->elements[0].str, epoch, pages + 1);
      return;
    }
    if (subscriber_->up()) ids_->rebuilt();  // else: changes may have been missed; the reconnect rebuilds
    if (ids_->ids() > ids_->capacity())
      log::warn("redis store: Redis holds more ids than store.lookups.expected_ids; the lookup filter is not used "
                "(every lookup asks Redis) until they fit: raise expected_ids",
                {{"ids", ids_->ids()}, {"expected_ids", ids_->capacity()}});
    else
      log::info("redis store: lookup filter built", {{"ids", ids_->ids()}, {"ready", ids_->ready()}, {"bits", ids_->bits()}});
  });
}

void RedisStore::reloadRecords(std::string_view ns, bool notify, std::function<void()> then) {
  if (std::find(std::begin(kNamespaces), std::end(kNamespaces), ns) == std::end(kNamespaces)) {
    if (then) then();
    return;
  }
  // HSCAN in pages (never one reply of unbounded size, never a long command on the
  // server); the mirror changes only once the whole hash is read.
  auto fresh = std::make_shared<std::vector<Record>>();
  scanRecords(std::string(ns), "0", fresh, notify, std::move(then), 0);
}

void RedisStore::scanRecords(std::string name, std::string cursor, std::shared_ptr<std::vector<Record>> fresh, bool notify,
                             std::function<void()> then, unsigned pages) {
  constexpr unsigned kMaxPages = 10'000;  // 10 M records at 1,000 a page: far past any real use
  std::string key = std::string(kRecordsPrefix) + name;
  control_->send({"HSCAN", key, cursor, "COUNT", "1000"}, [this, name, fresh, notify, then = std::move(then), pages](std::optional<RedisReply> r) mutable {
    const bool page = r && r->type == RedisReply::Type::Array && r->elements.size() == 2 &&
                      r->elements[0].type == RedisReply::Type::String && r->elements[1].type == RedisReply::Type::Array &&
                      r->elements[1].elements.size() % 2 == 0;
    if (!page) {  // unreachable or malformed: the mirror stays as it is until the next resync
      if (then) then();
      return;
    }
    const auto& items = r->elements[1].elements;
    for (std::size_t i = 0; i + 1 < items.size(); i += 2) fresh->push_back({items[i].str, items[i + 1].str});
    const std::string next = r->elements[0].str;
    if (next != "0" && pages + 1 < kMaxPages) {
      scanRecords(name, next, fresh, notify, std::move(then), pages + 1);
      return;
    }
    // HSCAN may return a field twice (the hash was resized meanwhile): the last wins.
    std::stable_sort(fresh->begin(), fresh->end(), [](const Record& a, const Record& b) { return a.id < b.id; });
    for (std::size_t i = 0; i + 1 < fresh->size();) {
      if ((*fresh)[i].id == (*fresh)[i + 1].id) fresh->erase(fresh->begin() + static_cast<std::ptrdiff_t>(i));
      else ++i;
    }
    bool changed = false;
    std::vector<std::function<void()>> listeners;
    {
      std::lock_guard lock(mu_);
      auto& current = records_[name];
      changed = current != *fresh;
      if (changed) current = std::move(*fresh);
      listeners = listeners_;
    }
    if (changed) recordsChanged();
    if (changed && notify)
      for (auto& fn : listeners) fn();
    if (then) then();
  });
}

std::vector<StateStore::Record> RedisStore::records(std::string_view ns) const {
  std::lock_guard lock(mu_);
  auto it = records_.find(ns);
  return it == records_.end() ? std::vector<Record>{} : it->second;
}

void RedisStore::putRecord(std::string_view ns, std::string_view id, std::string json, WriteDone done) {
  writeRecord(std::string(ns), std::string(id), std::move(json), std::move(done));
}

void RedisStore::eraseRecord(std::string_view ns, std::string_view id, WriteDone done) {
  writeRecord(std::string(ns), std::string(id), std::nullopt, std::move(done));
}

// HSET (a value) or HDEL (none), then the mirror, the other replicas (PUBLISH) and this
// one's listeners: its own message back finds nothing new, so each change is said once.
void RedisStore::writeRecord(std::string ns, std::string id, std::optional<std::string> json, WriteDone done) {
  asio::post(*control_io_, [this, ns = std::move(ns), id = std::move(id), json = std::move(json), done = std::move(done)]() mutable {
    const std::string key = std::string(kRecordsPrefix) + ns;
    auto then = [this, ns, id, json, done = std::move(done)](std::optional<RedisReply> r) mutable {
      if (!r || r->isError()) {
        done("the Redis store did not take the change (" + std::string(r ? r->str : control_->lastError()) + "); nothing was changed");
        return;
      }
      std::vector<std::function<void()>> listeners;
      {
        std::lock_guard lock(mu_);
        auto& list = records_[ns];
        auto it = std::find_if(list.begin(), list.end(), [&](const Record& x) { return x.id == id; });
        if (!json) {
          if (it != list.end()) list.erase(it);
        } else if (it != list.end()) {
          it->json = *json;
        } else {
          list.push_back({id, *json});
          std::sort(list.begin(), list.end(), [](const Record& a, const Record& b) { return a.id < b.id; });
        }
        listeners = listeners_;
      }
      recordsChanged();
      control_->send({"PUBLISH", kChangesChannel, ns}, [](std::optional<RedisReply>) {});
      for (auto& fn : listeners) fn();
      done(std::nullopt);
    };
    if (!region_.empty() && ns != "nodes" && ns != "endpoints") {
      // The record and its time in one script: the region link orders writes by it.
      control_->send({"EVAL", region_scripts::kWrite, "4", key, "tahua:region:meta:" + ns, "tahua:region:hlc", "tahua:region:ver:" + ns, region_, id,
                      json ? *json : std::string(), json ? "0" : "1"},
                     std::move(then));
    } else if (json) {
      control_->send({"HSET", key, id, *json}, std::move(then));
    } else {
      control_->send({"HDEL", key, id}, std::move(then));
    }
  });
}

void RedisStore::onRecordsChanged(std::function<void()> fn) {
  std::lock_guard lock(mu_);
  listeners_.push_back(std::move(fn));
}

// A log is a stream (tahua:log:<name>) trimmed to its newest `keep` entries by the
// append itself; one field "e" holds the entry. Both go through the control connection,
// like record writes (an admin action, never a request's path).
void RedisStore::appendLog(std::string_view log, std::string json, std::size_t keep, WriteDone done) {
  std::vector<std::string> args{"XADD", "tahua:log:" + std::string(log), "MAXLEN", std::to_string(std::max<std::size_t>(keep, 1)), "*", "e",
                                std::move(json)};
  asio::post(*control_io_, [this, args = std::move(args), done = std::move(done)]() mutable {
    control_->send(std::move(args), [this, done = std::move(done)](std::optional<RedisReply> r) mutable {
      if (!r || r->isError()) done("the Redis store did not take the log entry (" + std::string(r ? r->str : control_->lastError()) + ")");
      else done(std::nullopt);
    });
  });
}

void RedisStore::readLog(std::string_view log, std::string_view before, std::size_t count, std::function<void(LogPage)> done) {
  // A stream id is <ms>-<seq>; anything else is not one of ours (and would be a Redis error).
  const auto dash = before.find('-');
  const auto digits = [](std::string_view s) { return !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string_view::npos; };
  if (!before.empty() && (dash == std::string_view::npos || !digits(before.substr(0, dash)) || !digits(before.substr(dash + 1)))) {
    done(LogPage{});
    return;
  }
  std::vector<std::string> args{"XREVRANGE", "tahua:log:" + std::string(log), before.empty() ? std::string("+") : "(" + std::string(before), "-",
                                "COUNT", std::to_string(std::clamp<std::size_t>(count, 1, kMaxLogRead))};
  asio::post(*control_io_, [this, args = std::move(args), done = std::move(done)]() mutable {
    control_->send(std::move(args), [this, done = std::move(done)](std::optional<RedisReply> r) mutable {
      LogPage page;
      if (!r || r->isError() || r->type != RedisReply::Type::Array) {
        page.error = "the Redis store did not answer (" + std::string(r ? r->str : control_->lastError()) + ")";
        done(std::move(page));
        return;
      }
      for (const auto& e : r->elements) {
        // [id, [field, value, ...]]
        if (e.type != RedisReply::Type::Array || e.elements.size() != 2 || e.elements[1].type != RedisReply::Type::Array) continue;
        const auto& fields = e.elements[1].elements;
        for (std::size_t i = 0; i + 1 < fields.size(); i += 2)
          if (fields[i].str == "e") page.entries.push_back({e.elements[0].str, fields[i + 1].str});
      }
      done(std::move(page));
    });
  });
}

// An answer is one string value (JSON, the body in base64) set with its TTL in one
// command: no state without an expiry, whatever happens between two commands.
void RedisStore::getIdempotent(std::string_view key, std::function<void(std::optional<Idempotent>)> done) {
  RedisClient* conn = workerClient().get();
  if (!conn || !conn->usable()) {
    local_.getIdempotent(key, std::move(done));
    return;
  }
  std::string k(key);
  conn->send({"GET", k}, [this, k, done = std::move(done)](std::optional<RedisReply> r) mutable {
    if (!r || r->isError()) {
      local_.getIdempotent(k, std::move(done));
      return;
    }
    Idempotent out;
    if (r->type == RedisReply::Type::String) {
      boost::system::error_code ec;
      auto v = readJson(r->str, ec);
      const auto* o = ec ? nullptr : v.if_object();
      auto text = [&](std::string_view f) { return o && o->contains(f) && o->at(f).is_string() ? std::string(o->at(f).as_string()) : std::string(); };
      auto body = base64Decode(text("body"));
      if (o && body && o->contains("status") && o->at("status").is_int64()) {
        out.fingerprint = text("fingerprint");
        out.content_type = text("content_type");
        out.status = static_cast<int>(o->at("status").as_int64());
        out.body = std::move(*body);
      }
    }
    done(std::move(out));
  });
}

void RedisStore::putIdempotent(std::string_view key, Idempotent record, Millis ttl) {
  RedisClient* conn = workerClient().get();
  if (!conn || !conn->usable()) {
    local_.putIdempotent(key, std::move(record), ttl);
    return;
  }
  const std::string value = boost::json::serialize(boost::json::object{{"fingerprint", record.fingerprint},
                                                                       {"status", record.status},
                                                                       {"content_type", record.content_type},
                                                                       {"body", base64Encode(record.body)}});
  auto kept = std::make_shared<Idempotent>(std::move(record));
  std::string k(key);
  conn->send({"SET", k, value, "PX", std::to_string(ttl.count())}, [this, k, kept, ttl](std::optional<RedisReply> r) {
    if (!r || r->isError()) local_.putIdempotent(k, std::move(*kept), ttl);  // this replica keeps it at least
  });
}

// A value is one Redis string set with its TTL in one command. Redis away: the caller
// hears Unavailable (or the write's error); this replica does not answer in its place.
void RedisStore::lookup(std::string_view key, std::function<void(ValueResult)> done, bool filter) {
  // The id filter first: an id no replica ever wrote costs no round trip. Not while the
  // connection is away: then the answer is "unavailable" (a 503), not "missing".
  RedisClient* conn = workerClient().get();
  const bool reachable = conn && conn->usable();
  const bool filtered = ids_ && key.substr(0, kValuePrefix.size()) == kValuePrefix;
  std::uint64_t stamp = 0;
  if (filtered && reachable) {
    const IdFilter::Verdict verdict = filter ? ids_->check(key) : IdFilter::Verdict::Ask;
    switch (verdict) {
      case IdFilter::Verdict::Absent:
        lookups_filtered_.fetch_add(1, std::memory_order_relaxed);
        done(ValueResult{});
        return;
      case IdFilter::Verdict::Missed:
        lookups_cached_.fetch_add(1, std::memory_order_relaxed);
        done(ValueResult{});
        return;
      case IdFilter::Verdict::Ask: stamp = ids_->stamp(key); break;
    }
  }
  lookups_asked_.fetch_add(1, std::memory_order_relaxed);
  if (!reachable) {
    done(ValueResult{ValueResult::Status::Unavailable, {}});
    return;
  }
  conn->send({"GET", key}, [this, filtered, stamp, k = std::string(filtered ? key : std::string_view()),
                            done = std::move(done)](std::optional<RedisReply> r) mutable {
    if (!r || r->isError() || (r->type != RedisReply::Type::String && r->type != RedisReply::Type::Nil)) {
      done(ValueResult{ValueResult::Status::Unavailable, {}});
      return;
    }
    if (r->type == RedisReply::Type::Nil) {
      if (filtered) ids_->missed(k, stamp);
      done(ValueResult{});
      return;
    }
    done(ValueResult{ValueResult::Status::Found, std::move(r->str)});
  });
}

void RedisStore::putValue(std::string_view key, std::string value, Millis ttl, WriteDone done) {
  if (value.size() > kMaxValueBytes || ttl.count() <= 0) {
    done("a value is at most 1 MiB and has a lifetime");
    return;
  }
  RedisClient* conn = workerClient().get();
  if (!conn || !conn->usable()) {
    done("the Redis store is unavailable");
    return;
  }
  // In the filter before it is written: a lookup here after the write never misses it.
  // Other replicas hear of it through the values channel.
  if (ids_) ids_->add(key);
  conn->send({"SET", key, value, "PX", std::to_string(ttl.count())},
             [done = std::move(done)](std::optional<RedisReply> r) mutable {
               if (!r || r->isError()) done("the Redis store did not take the value");
               else done(std::nullopt);
             });
  conn->send({"PUBLISH", kValuesChannel, key}, [](std::optional<RedisReply>) {});
}

void RedisStore::eraseValue(std::string_view key, WriteDone done) {
  RedisClient* conn = workerClient().get();
  if (!conn || !conn->usable()) {
    done("the Redis store is unavailable");
    return;
  }
  conn->send({"DEL", key}, [done = std::move(done)](std::optional<RedisReply> r) mutable {
    if (!r || r->isError()) done("the Redis store did not erase the value");
    else done(std::nullopt);
  });
}

namespace {
// A group's bookkeeping keys, with its name as hash tag: in a cluster they share the slot
// of its values (whose keys carry the same tag).
std::vector<std::string> groupKeys(std::string_view key, std::string_view group) {
  std::string base = "tahua:vgroup:{";
  base.append(group).append("}:");
  return {std::string(key), base + "order", base + "sizes", base + "bytes"};
}
}  // namespace

void RedisStore::putGroupedValue(std::string_view key, std::string value, Millis ttl, ValueGroup group, WriteDone done) {
  if (value.size() > kMaxValueBytes || ttl.count() <= 0 || group.name.empty()) {
    done("a value is at most 1 MiB, has a lifetime and a group");
    return;
  }
  RedisClient* conn = workerClient().get();
  if (!conn || !conn->usable()) {
    done("the Redis store is unavailable");
    return;
  }
  if (ids_) ids_->add(key);
  std::vector<std::string> args{"4"};
  for (auto& k : groupKeys(key, group.name)) args.push_back(std::move(k));
  args.push_back(std::move(value));
  args.push_back(std::to_string(ttl.count()));
  args.push_back(std::to_string(group.max_bytes));
  args.push_back(std::to_string(unixMillis()));
  evalsha(*conn, put_grouped_sha_, redis_scripts::kPutGrouped, std::move(args),
          [done = std::move(done)](std::optional<RedisReply> r) mutable {
            if (!r || r->isError()) done("the Redis store did not take the value");
            else done(std::nullopt);
          });
  conn->send({"PUBLISH", kValuesChannel, key}, [](std::optional<RedisReply>) {});
}

void RedisStore::eraseGroupedValue(std::string_view key, std::string_view group, WriteDone done) {
  RedisClient* conn = workerClient().get();
  if (!conn || !conn->usable()) {
    done("the Redis store is unavailable");
    return;
  }
  std::vector<std::string> args{"4"};
  for (auto& k : groupKeys(key, group)) args.push_back(std::move(k));
  evalsha(*conn, erase_grouped_sha_, redis_scripts::kEraseGrouped, std::move(args),
          [done = std::move(done)](std::optional<RedisReply> r) mutable {
            if (!r || r->isError()) done("the Redis store did not erase the value");
            else done(std::nullopt);
          });
}

void RedisStore::tryLock(std::string_view name, std::string_view owner, Millis ttl, std::function<void(bool)> done) {
  RedisClient* conn = workerClient().get();
  if (!conn || !conn->usable()) {
    local_.tryLock(name, owner, ttl, std::move(done));
    return;
  }
  std::string n(name), o(owner);
  conn->send({"SET", n, o, "NX", "PX", std::to_string(ttl.count())}, [this, n, o, ttl, done = std::move(done)](std::optional<RedisReply> r) mutable {
    if (!r || r->isError()) {
      local_.tryLock(n, o, ttl, std::move(done));
      return;
    }
    done(r->type == RedisReply::Type::Status && r->str == "OK");
  });
}

void RedisStore::renewLock(std::string_view name, std::string_view owner, Millis ttl, std::function<void(bool)> done) {
  RedisClient* conn = workerClient().get();
  if (!conn || !conn->usable()) {
    local_.renewLock(name, owner, ttl, std::move(done));
    return;
  }
  std::string n(name), o(owner);
  evalsha(*conn, renew_sha_, redis_scripts::kRenewLock, {"1", n, o, std::to_string(ttl.count())},
          [this, n, o, ttl, done = std::move(done)](std::optional<RedisReply> r) mutable {
            if (!r || r->isError()) {
              local_.renewLock(n, o, ttl, std::move(done));
              return;
            }
            done(r->type == RedisReply::Type::Integer && r->integer == 1);
          });
}

void RedisStore::unlock(std::string_view name, std::string_view owner) {
  local_.unlock(name, owner);  // it may have been taken here while Redis was away
  RedisClient* conn = workerClient().get();
  if (!conn || !conn->usable()) return;  // the lock expires by its TTL
  evalsha(*conn, unlock_sha_, redis_scripts::kUnlock, {"1", std::string(name), std::string(owner)}, [](std::optional<RedisReply>) {});
}

}  // namespace tahua
