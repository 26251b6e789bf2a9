#include "store/memory_store.h"

#include <algorithm>
#include <chrono>

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
    c.state.fresh = false;
    c.state.a = q.period;
    c.state.b = q.used;
  }
  flusher_ = std::thread([this, flush_interval] {
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
  journal_->compactIfLarge(records_);
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

void MemoryStore::onRecordsChanged(std::function<void()> fn) {
  std::lock_guard lock(records_mu_);
  listeners_.push_back(std::move(fn));
}

void MemoryStore::changed() {
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
    shard[i] = shardOf(checks[i].key);
    order[locked++] = shard[i];
  }
  std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(locked));
  locked = static_cast<std::size_t>(std::unique(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(locked)) - order.begin());
  for (std::size_t i = 0; i < locked; ++i) shards_[order[i]].mu.lock();

  const std::int64_t now = out.at_ms = clock_();
  std::array<Counter*, Admission::kMaxChecks> states{};
  for (std::size_t i = 0; i < checks.size(); ++i) {
    states[i] = &counterOf(shards_[shard[i]], checks[i].key, checks[i].spec);
    out.decisions[i] = applyLimit(checks[i].spec, states[i]->state, now, checks[i].cost, false);
    if (!out.decisions[i].allowed && out.allowed) {
      out.allowed = false;
      out.denied = i;
    }
  }
  if (out.allowed)
    for (std::size_t i = 0; i < checks.size(); ++i) {
      applyLimit(checks[i].spec, states[i]->state, now, checks[i].cost, true);
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
  Shard& s = shards_[shardOf(check.key)];
  std::lock_guard lock(s.mu);
  Counter& c = counterOf(s, check.key, check.spec);
  adjustLimit(check.spec, c.state, clock_(), charged_ms, delta);
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
