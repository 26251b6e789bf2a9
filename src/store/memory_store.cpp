#include "store/memory_store.h"

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <chrono>

#include "core/base64.h"
#include "core/json_read.h"
#include "core/thread_name.h"

namespace tahua {

std::int64_t unixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

MemoryStore::~MemoryStore() {
  {
    std::lock_guard lock(flush_mu_);
    stopping_ = true;
  }
  flush_cv_.notify_all();
  if (flusher_.joinable()) flusher_.join();
  flush();  // what changed since the last tick
}

MemoryStore::Counter& MemoryStore::counterOf(Shard& shard, std::string_view key, const LimitSpec& spec) {
  auto it = shard.counters.find(key);
  if (it == shard.counters.end()) {
    it = shard.counters.emplace(std::string(key), Counter{}).first;
    it->second.quota = spec.kind == LimitKind::Quota;
    it->second.shard = static_cast<std::size_t>(&shard - shards_.data());
  }
  return it->second;
}

bool MemoryStore::openJournal(const std::string& path, Millis flush_interval, std::vector<std::string>& warnings,
                              std::string& error) {
  std::lock_guard lock(records_mu_);
  journal_ = std::make_unique<Journal>(path, records_, warnings, error);
  if (!error.empty()) {
    journal_.reset();
    return false;
  }
  // Quota consumption read back: those counters resume where they were.
  for (const auto& [key, q] : records_.quotas) {
    Shard& s = shards_[shardOf(key)];
    std::lock_guard shard_lock(s.mu);
    Counter& c = s.counters[key];
    c.quota = true;
    c.shard = shardOf(key);
    c.state.fresh = false;
    c.state.a = q.period;
    c.state.b = q.used;
  }
  loadAnswers();
  loadValues();
  flusher_ = std::thread([this, flush_interval] {
    nameThisThread("tahua-store");
    std::unique_lock lock(flush_mu_);
    while (!flush_cv_.wait_for(lock, flush_interval, [this] { return stopping_; })) {
      lock.unlock();
      flush();
      lock.lock();
    }
  });
  return true;
}

void MemoryStore::flush() {
  std::lock_guard lock(records_mu_);
  if (!journal_) return;
  std::string lines;
  for (auto& shard : shards_) {
    std::lock_guard shard_lock(shard.mu);
    for (auto& [key, c] : shard.counters) {
      if (!c.quota || !c.dirty) continue;
      c.dirty = false;
      JournalState::Quota q{c.state.a, c.state.b};
      records_.quotas[key] = q;
      lines += Journal::quotaLine(key, q);
    }
  }
  if (!lines.empty()) journal_->append(lines, false);
  expireAnswers(clock_());
  expireValues(clock_());
  journal_->compactIfLarge(records_);
}

namespace {
constexpr std::string_view kAnswers = "idempotency";
}

void MemoryStore::loadAnswers() {
  // Under records_mu_ (openJournal).
  auto it = records_.records.find(kAnswers);
  if (it == records_.records.end()) return;
  const std::int64_t now = clock_();
  std::lock_guard lock(idem_mu_);
  for (const auto& [key, doc] : it->second) {
    boost::system::error_code ec;
    auto v = readJson(doc, ec);
    const auto* o = ec ? nullptr : v.if_object();
    if (!o || !o->contains("expires_ms") || !o->at("expires_ms").is_int64()) continue;
    KeptAnswer a;
    a.expires_ms = o->at("expires_ms").as_int64();
    if (a.expires_ms <= now) continue;
    auto text = [&](std::string_view k) { return o->contains(k) && o->at(k).is_string() ? std::string(o->at(k).as_string()) : std::string(); };
    a.record.fingerprint = text("fingerprint");
    a.record.content_type = text("content_type");
    a.record.status = o->contains("status") && o->at("status").is_int64() ? static_cast<int>(o->at("status").as_int64()) : 200;
    auto body = base64Decode(text("body"));
    if (!body) continue;
    a.record.body = std::move(*body);
    answer_bytes_ += a.record.body.size();
    answers_[key] = std::move(a);
  }
}

void MemoryStore::expireAnswers(std::int64_t now) {
  // Under records_mu_ (flush).
  std::lock_guard lock(idem_mu_);
  auto recs = records_.records.find(kAnswers);
  for (auto it = answers_.begin(); it != answers_.end();) {
    if (it->second.expires_ms > now) {
      ++it;
      continue;
    }
    if (recs != records_.records.end()) recs->second.erase(it->first);
    answer_bytes_ -= std::min(answer_bytes_, it->second.record.body.size());
    it = answers_.erase(it);
  }
  std::erase_if(locks_, [&](const auto& kv) { return kv.second.expires_ms <= now; });
}

void MemoryStore::getIdempotent(std::string_view key, std::function<void(std::optional<Idempotent>)> done) {
  std::optional<Idempotent> out;
  {
    std::lock_guard lock(idem_mu_);
    auto it = answers_.find(key);
    if (it != answers_.end() && it->second.expires_ms > clock_()) out = it->second.record;
  }
  // Found or not, the store answered: an empty record means "none".
  done(out ? std::move(out) : std::optional<Idempotent>(Idempotent{}));
}

void MemoryStore::putIdempotent(std::string_view key, Idempotent record, Millis ttl) {
  const std::int64_t expires = clock_() + ttl.count();
  std::string doc;
  if (journal_) {
    boost::json::object o{{"fingerprint", record.fingerprint}, {"status", record.status}, {"content_type", record.content_type},
                          {"body", base64Encode(record.body)}, {"expires_ms", expires}};
    doc = boost::json::serialize(o);
  }
  {
    std::lock_guard lock(idem_mu_);
    auto& slot = answers_[std::string(key)];
    answer_bytes_ -= std::min(answer_bytes_, slot.record.body.size());
    answer_bytes_ += record.body.size();
    slot = KeptAnswer{std::move(record), expires};
    if (answer_bytes_ > kMaxAnswerBytes) {
      // Over the memory bound: drop the tenth that expires soonest (a retry of those runs
      // again, as without the key). Rare, so a scan is fine.
      std::vector<std::pair<std::int64_t, std::string>> order;
      order.reserve(answers_.size());
      for (const auto& [k, a] : answers_) order.emplace_back(a.expires_ms, k);
      std::sort(order.begin(), order.end());
      for (std::size_t i = 0; i < order.size() / 10 + 1 && i < order.size(); ++i) {
        auto it = answers_.find(order[i].second);
        answer_bytes_ -= std::min(answer_bytes_, it->second.record.body.size());
        answers_.erase(it);
      }
    }
    // Without a journal nothing else sweeps: expired answers go every 1,024 puts.
    if (!journal_ && ++puts_since_sweep_ >= 1024) {
      puts_since_sweep_ = 0;
      const std::int64_t now = clock_();
      for (auto it = answers_.begin(); it != answers_.end();) {
        if (it->second.expires_ms > now) {
          ++it;
          continue;
        }
        answer_bytes_ -= std::min(answer_bytes_, it->second.record.body.size());
        it = answers_.erase(it);
      }
      std::erase_if(locks_, [&](const auto& kv) { return kv.second.expires_ms <= now; });
    }
  }
  if (!doc.empty()) {
    std::lock_guard lock(records_mu_);
    // Not fsynced: losing the last answers in a machine crash means a retry runs again,
    // as it would have without the key.
    if (journal_->append(Journal::putLine(std::string(kAnswers), std::string(key), doc), false))
      records_.records[std::string(kAnswers)][std::string(key)] = std::move(doc);
  }
}

namespace {
constexpr std::string_view kValues = "values";
}

void MemoryStore::loadValues() {
  // Under records_mu_ (openJournal).
  auto it = records_.records.find(kValues);
  if (it == records_.records.end()) return;
  const std::int64_t now = clock_();
  std::lock_guard lock(values_mu_);
  for (const auto& [key, doc] : it->second) {
    boost::system::error_code ec;
    auto v = readJson(doc, ec);
    const auto* o = ec ? nullptr : v.if_object();
    if (!o || !o->contains("expires_ms") || !o->at("expires_ms").is_int64() || !o->contains("v") || !o->at("v").is_string()) continue;
    const std::int64_t expires = o->at("expires_ms").as_int64();
    auto value = base64Decode(o->at("v").as_string());
    if (expires <= now || !value) continue;
    value_bytes_ += key.size() + value->size();
    KeptValue kept{std::move(*value), expires, {}, 0};
    if (const auto* g = o->if_contains("g"); g && g->is_string()) kept.group = g->as_string();
    values_[key] = std::move(kept);
  }
  // Groups in the order their values were written (expiry order: one group, one TTL).
  std::vector<std::pair<std::int64_t, const std::string*>> grouped;
  for (const auto& [key, kept] : values_)
    if (!kept.group.empty()) grouped.emplace_back(kept.expires_ms, &key);
  std::sort(grouped.begin(), grouped.end());
  for (const auto& [expires, key] : grouped) groupValue(*key, values_.find(*key)->second, SIZE_MAX, nullptr);
}

void MemoryStore::groupValue(const std::string& key, KeptValue& kept, std::size_t max_bytes, std::vector<std::string>* evicted) {
  const std::string group = kept.group;  // `kept` may be evicted below
  {
    ValueGroupState& g = value_groups_[group];
    kept.seq = ++value_seq_;
    g.order.emplace_back(kept.seq, key);
    g.bytes += key.size() + kept.value.size();
    ++g.live;
  }
  // dropValue erases a group that empties: look it up again after each.
  for (auto g = value_groups_.find(group); g != value_groups_.end() && g->second.bytes > max_bytes && !g->second.order.empty();
       g = value_groups_.find(group)) {
    auto [seq, victim] = std::move(g->second.order.front());
    g->second.order.pop_front();
    auto it = values_.find(victim);
    if (it == values_.end() || it->second.seq != seq || it->second.group != group) continue;  // gone already
    if (evicted) evicted->push_back(victim);
    dropValue(it);
  }
  // Entries of values dropped since: compacted once they are most of the order.
  auto g = value_groups_.find(group);
  if (g != value_groups_.end() && g->second.order.size() > 64 && g->second.order.size() > 2 * g->second.live) {
    std::erase_if(g->second.order, [&](const auto& e) {
      auto it = values_.find(e.second);
      return it == values_.end() || it->second.seq != e.first;
    });
  }
}

void MemoryStore::dropValue(decltype(values_)::iterator it) {
  const std::size_t size = it->first.size() + it->second.value.size();
  value_bytes_ -= std::min(value_bytes_, size);
  if (!it->second.group.empty()) {
    if (auto g = value_groups_.find(it->second.group); g != value_groups_.end()) {
      g->second.bytes -= std::min(g->second.bytes, size);
      if (g->second.live > 0) --g->second.live;
      if (g->second.live == 0) value_groups_.erase(g);
    }
  }
  values_.erase(it);
}

void MemoryStore::expireValues(std::int64_t now) {
  // Under records_mu_ (flush).
  std::lock_guard lock(values_mu_);
  auto recs = records_.records.find(kValues);
  for (auto it = values_.begin(); it != values_.end();) {
    auto next = std::next(it);
    if (it->second.expires_ms <= now) {
      if (recs != records_.records.end()) recs->second.erase(it->first);
      dropValue(it);
    }
    it = next;
  }
}

void MemoryStore::getValue(std::string_view key, std::function<void(ValueResult)> done) {
  ValueResult out;
  {
    std::lock_guard lock(values_mu_);
    auto it = values_.find(key);
    if (it != values_.end() && it->second.expires_ms > clock_()) {
      out.status = ValueResult::Status::Found;
      out.value = it->second.value;
    }
  }
  done(std::move(out));
}

void MemoryStore::putValue(std::string_view key, std::string value, Millis ttl, WriteDone done) {
  putValueIn(key, std::move(value), ttl, ValueGroup{}, std::move(done));
}

void MemoryStore::putGroupedValue(std::string_view key, std::string value, Millis ttl, ValueGroup group, WriteDone done) {
  if (group.name.empty()) {
    done("a value's group has a name");
    return;
  }
  putValueIn(key, std::move(value), ttl, group, std::move(done));
}

void MemoryStore::eraseGroupedValue(std::string_view key, std::string_view, WriteDone done) {
  eraseValue(key, std::move(done));  // the value knows its group
}

void MemoryStore::putValueIn(std::string_view key, std::string value, Millis ttl, ValueGroup group, WriteDone done) {
  if (value.size() > kMaxValueBytes || ttl.count() <= 0) {
    done("a value is at most 1 MiB and has a lifetime");
    return;
  }
  const std::int64_t expires = clock_() + ttl.count();
  std::string doc;
  if (journal_) {
    boost::json::object o{{"v", base64Encode(value)}, {"expires_ms", expires}};
    if (!group.name.empty()) o["g"] = group.name;
    doc = boost::json::serialize(o);
  }
  std::vector<std::string> evicted;
  {
    std::lock_guard lock(values_mu_);
    const std::int64_t now = clock_();
    // Without a journal nothing else sweeps: expired values go every 1,024 puts.
    if (!journal_ && ++value_puts_since_sweep_ >= 1024) {
      value_puts_since_sweep_ = 0;
      for (auto it = values_.begin(); it != values_.end();) {
        auto next = std::next(it);
        if (it->second.expires_ms <= now) dropValue(it);
        it = next;
      }
    }
    if (auto it = values_.find(key); it != values_.end()) dropValue(it);
    value_bytes_ += key.size() + value.size();
    auto [at, fresh] = values_.emplace(std::string(key), KeptValue{std::move(value), expires, std::string(group.name), 0});
    if (!group.name.empty()) groupValue(at->first, at->second, group.max_bytes, &evicted);
    if (value_bytes_ > kMaxValueStoreBytes) {
      // Over the memory bound: the tenth that expires soonest goes (rare: a scan is fine).
      std::vector<std::pair<std::int64_t, std::string_view>> order;
      order.reserve(values_.size());
      for (const auto& [k, v] : values_) order.emplace_back(v.expires_ms, k);
      std::sort(order.begin(), order.end());
      std::vector<std::string> victims;
      for (std::size_t i = 0; i < order.size() / 10 + 1 && i < order.size(); ++i) victims.emplace_back(order[i].second);
      for (const auto& k : victims) dropValue(values_.find(k));
    }
  }
  if (!doc.empty()) {
    std::lock_guard lock(records_mu_);
    if (journal_->append(Journal::putLine(std::string(kValues), std::string(key), doc), false))
      records_.records[std::string(kValues)][std::string(key)] = std::move(doc);
    for (const auto& k : evicted)
      if (journal_->append(Journal::delLine(std::string(kValues), k), false))
        if (auto it = records_.records.find(kValues); it != records_.records.end()) it->second.erase(k);
  }
  done(std::nullopt);
}

void MemoryStore::eraseValue(std::string_view key, WriteDone done) {
  bool had = false;
  {
    std::lock_guard lock(values_mu_);
    if (auto it = values_.find(key); it != values_.end()) {
      dropValue(it);
      had = true;
    }
  }
  if (had && journal_) {
    std::lock_guard lock(records_mu_);
    if (journal_->append(Journal::delLine(std::string(kValues), std::string(key)), false))
      if (auto it = records_.records.find(kValues); it != records_.records.end()) it->second.erase(std::string(key));
  }
  done(std::nullopt);
}

void MemoryStore::tryLock(std::string_view name, std::string_view owner, Millis ttl, std::function<void(bool)> done) {
  bool held = false;
  {
    std::lock_guard lock(idem_mu_);
    const std::int64_t now = clock_();
    auto it = locks_.find(name);
    if (it == locks_.end() || it->second.expires_ms <= now || it->second.owner == owner) {
      locks_[std::string(name)] = Lock{std::string(owner), now + ttl.count()};
      held = true;
    }
  }
  done(held);
}

void MemoryStore::renewLock(std::string_view name, std::string_view owner, Millis ttl, std::function<void(bool)> done) {
  bool held = false;
  {
    std::lock_guard lock(idem_mu_);
    const std::int64_t now = clock_();
    auto it = locks_.find(name);
    if (it != locks_.end() && it->second.owner == owner && it->second.expires_ms > now) {
      it->second.expires_ms = now + ttl.count();
      held = true;
    }
  }
  done(held);
}

void MemoryStore::unlock(std::string_view name, std::string_view owner) {
  std::lock_guard lock(idem_mu_);
  auto it = locks_.find(name);
  if (it != locks_.end() && it->second.owner == owner) locks_.erase(it);
}

std::vector<StateStore::Record> MemoryStore::records(std::string_view ns) const {
  std::lock_guard lock(records_mu_);
  std::vector<Record> out;
  if (auto it = records_.records.find(ns); it != records_.records.end())
    for (const auto& [id, json] : it->second) out.push_back({id, json});
  return out;
}

void MemoryStore::putRecord(std::string_view ns, std::string_view id, std::string json, WriteDone done) {
  std::optional<std::string> error;
  {
    std::lock_guard lock(records_mu_);
    if (journal_ && !journal_->append(Journal::putLine(std::string(ns), std::string(id), json), true))
      error = "the state journal could not be written";
    else
      records_.records[std::string(ns)][std::string(id)] = std::move(json);
  }
  if (!error) changed();
  done(std::move(error));
}

void MemoryStore::eraseRecord(std::string_view ns, std::string_view id, WriteDone done) {
  std::optional<std::string> error;
  {
    std::lock_guard lock(records_mu_);
    if (journal_ && !journal_->append(Journal::delLine(std::string(ns), std::string(id)), true))
      error = "the state journal could not be written";
    else if (auto it = records_.records.find(ns); it != records_.records.end())
      it->second.erase(std::string(id));
  }
  if (!error) changed();
  done(std::move(error));
}

void MemoryStore::appendLog(std::string_view log, std::string json, std::size_t keep, WriteDone done) {
  {
    std::lock_guard lock(logs_mu_);
    auto it = logs_.find(log);
    if (it == logs_.end()) it = logs_.emplace(std::string(log), std::deque<std::pair<std::uint64_t, std::string>>{}).first;
    it->second.emplace_back(++log_seq_, std::move(json));
    while (it->second.size() > std::max<std::size_t>(keep, 1)) it->second.pop_front();
  }
  done(std::nullopt);
}

void MemoryStore::readLog(std::string_view log, std::string_view before, std::size_t count, std::function<void(LogPage)> done) {
  LogPage page;
  std::uint64_t below = UINT64_MAX;
  if (!before.empty()) {
    const auto [end, ec] = std::from_chars(before.data(), before.data() + before.size(), below);
    if (ec != std::errc() || end != before.data() + before.size()) below = 0;  // not one of ours: nothing older
  }
  count = std::min(count, kMaxLogRead);
  {
    std::lock_guard lock(logs_mu_);
    if (auto it = logs_.find(log); it != logs_.end()) {
      const auto& entries = it->second;
      // Ids ascend with position: start below `below` and walk back.
      auto from = std::lower_bound(entries.begin(), entries.end(), below,
                                   [](const auto& e, std::uint64_t id) { return e.first < id; });
      while (from != entries.begin() && page.entries.size() < count) {
        --from;
        page.entries.push_back({std::to_string(from->first), from->second});
      }
    }
  }
  done(std::move(page));
}

void MemoryStore::onRecordsChanged(std::function<void()> fn) {
  std::lock_guard lock(records_mu_);
  listeners_.push_back(std::move(fn));
}

void MemoryStore::changed() {
  recordsChanged();
  std::vector<std::function<void()>> listeners;
  {
    std::lock_guard lock(records_mu_);
    listeners = listeners_;
  }
  for (auto& fn : listeners) fn();
}

void MemoryStore::admit(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) {
  Admission out;
  out.count = std::min(checks.size(), Admission::kMaxChecks);
  checks = checks.first(out.count);
  // The shards involved, each locked once, in index order.
  std::array<std::size_t, Admission::kMaxChecks> shard{};
  std::array<std::size_t, Admission::kMaxChecks> order{};
  std::size_t locked = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Counter* known = hinted(checks[i]);
    shard[i] = known ? known->shard : shardOf(checks[i].key);
    order[locked++] = shard[i];
  }
  std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(locked));
  locked = static_cast<std::size_t>(std::unique(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(locked)) - order.begin());
  for (std::size_t i = 0; i < locked; ++i) shards_[order[i]].mu.lock();

  const std::int64_t now = out.at_ms = clock_();
  std::array<Counter*, Admission::kMaxChecks> states{};
  for (std::size_t i = 0; i < checks.size(); ++i) {
    states[i] = hinted(checks[i]);
    if (!states[i]) {
      states[i] = &counterOf(shards_[shard[i]], checks[i].key, checks[i].spec);
      if (checks[i].hint) *checks[i].hint = states[i];
    }
    out.decisions[i] = applyLimit(checks[i].spec, states[i]->state, now, checks[i].cost, false);
    if (!out.decisions[i].allowed && out.allowed) {
      out.allowed = false;
      out.denied = i;
    }
  }
  if (out.allowed)
    for (std::size_t i = 0; i < checks.size(); ++i) {
      chargeLimit(checks[i].spec, states[i]->state, checks[i].cost);
      states[i]->dirty = true;
    }

  for (std::size_t i = locked; i-- > 0;) shards_[order[i]].mu.unlock();
  done(out);
}

void MemoryStore::peek(std::span<const LimitCheck> checks, std::function<void(const Admission&)> done) {
  Admission out;
  out.count = std::min(checks.size(), Admission::kMaxChecks);
  out.at_ms = clock_();
  for (std::size_t i = 0; i < out.count; ++i) {
    out.decisions[i] = peek(checks[i]);
    if (!out.decisions[i].allowed && out.allowed) {
      out.allowed = false;
      out.denied = i;
    }
  }
  done(out);
}

void MemoryStore::adjust(const LimitCheck& check, std::int64_t charged_ms, std::int64_t delta, bool) {
  if (delta == 0) return;
  Counter* known = hinted(check);
  Shard& s = shards_[known ? known->shard : shardOf(check.key)];
  std::lock_guard lock(s.mu);
  Counter& c = known ? *known : counterOf(s, check.key, check.spec);
  // The charge's time stands in for now: a bucket is not refilled here (the next
  // decision does that from its own last update), and no clock is read.
  adjustLimit(check.spec, c.state, charged_ms, charged_ms, delta);
  c.dirty = true;
}

LimitDecision MemoryStore::peek(const LimitCheck& check) {
  Shard& s = shards_[shardOf(check.key)];
  std::lock_guard lock(s.mu);
  return applyLimit(check.spec, counterOf(s, check.key, check.spec).state, clock_(), check.cost, false);
}

std::size_t MemoryStore::counters() const {
  std::size_t n = 0;
  for (const auto& s : shards_) {
    std::lock_guard lock(s.mu);
    n += s.counters.size();
  }
  return n;
}

}  // namespace tahua
