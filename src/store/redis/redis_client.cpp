#include "store/redis/redis_client.h"

#include <algorithm>
#include <charconv>
#include <strings.h>

#include "store/redis/redis_slot.h"

namespace tahua {

namespace {

bool is(std::string_view a, const char* b) {
  return a.size() == std::char_traits<char>::length(b) && strncasecmp(a.data(), b, a.size()) == 0;
}

// The key a command is routed by; nullopt: any node will do.
std::optional<std::string_view> commandKey(std::span<const std::string_view> args) {
  if (args.size() < 2) return std::nullopt;
  const std::string_view cmd = args[0];
  if (is(cmd, "EVALSHA") || is(cmd, "EVAL")) {
    if (args.size() < 4 || args[2] == "0") return std::nullopt;
    return args[3];
  }
  for (const char* keyless : {"PUBLISH", "SUBSCRIBE", "CONFIG", "SCRIPT", "CLUSTER", "PING", "INFO", "ASKING"})
    if (is(cmd, keyless)) return std::nullopt;
  return args[1];
}

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381": slot, host (may be empty:
// the replying node's own), port.
bool parseRedirect(std::string_view e, std::uint16_t& slot, std::string& host, std::uint16_t& port) {
  const auto sp1 = e.find(' ');
  const auto sp2 = e.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos) return false;
  const std::string_view s = e.substr(sp1 + 1, sp2 - sp1 - 1), addr = e.substr(sp2 + 1);
  const auto colon = addr.rfind(':');
  if (colon == std::string_view::npos) return false;
  unsigned sl = 0, p = 0;
  if (std::from_chars(s.data(), s.data() + s.size(), sl).ec != std::errc{} || sl >= kRedisSlots) return false;
  const std::string_view ps = addr.substr(colon + 1);
  if (std::from_chars(ps.data(), ps.data() + ps.size(), p).ec != std::errc{} || p == 0 || p > 65535) return false;
  slot = static_cast<std::uint16_t>(sl);
  host.assign(addr.substr(0, colon));
  port = static_cast<std::uint16_t>(p);
  return true;
}

constexpr std::size_t kMaxNodes = 1'000;  // Redis Cluster's own recommended ceiling
constexpr std::chrono::milliseconds kRefreshEvery{200};

}  // namespace

RedisClient::RedisClient(std::shared_ptr<RedisConnection> conn) : single_(std::move(conn)) {}

RedisClient::RedisClient(std::vector<RedisEndpoint> seeds, Factory make)
    : base_(seeds.at(0)), make_(std::move(make)), slots_(std::make_unique<std::array<std::uint16_t, 16384>>()) {
  slots_->fill(kUnknown);
  for (const auto& s : seeds) nodeAt(s.host, s.port);
}

std::size_t RedisClient::nodeAt(const std::string& host, std::uint16_t port) {
  std::string address = host + ":" + std::to_string(port);
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].address == address) return i;
  if (nodes_.size() >= kMaxNodes) return 0;
  RedisEndpoint ep = base_;
  ep.host = host;
  ep.port = port;
  ep.db = 0;
  nodes_.push_back({std::move(address), make_(ep), false});
  return nodes_.size() - 1;
}

std::uint16_t RedisClient::slotOf(std::string_view key) const { return single_ ? 0 : redisKeySlot(key); }

bool RedisClient::usable() const {
  if (single_) return single_->usable();
  return std::any_of(nodes_.begin(), nodes_.end(), [](const Node& n) { return n.conn->usable(); });
}

const char* RedisClient::lastError() const { return single_ ? single_->lastError() : last_error_; }

void RedisClient::close() {
  if (single_) return single_->close();
  for (auto& n : nodes_) n.conn->close();
}

std::vector<std::string> RedisClient::nodes() const {
  if (single_) return {""};
  std::vector<std::string> out;
  for (const auto& n : nodes_)
    if (n.master) out.push_back(n.address);
  return out;
}

void RedisClient::sendToNode(std::size_t node, std::initializer_list<std::string_view> args, Callback cb) {
  if (single_) return single_->send(args, std::move(cb));
  std::size_t seen = 0;
  for (auto& n : nodes_)
    if (n.master && seen++ == node) return n.conn->send(args, std::move(cb));
  cb(std::nullopt);
}

void RedisClient::send(std::span<const std::string_view> args, Callback cb) {
  if (single_) return single_->send(args, std::move(cb));
  // Formatted once: a redirection resends the same bytes.
  auto cmd = std::make_shared<std::string>();
  RedisConnection::formatCommand(*cmd, args);
  const auto key = commandKey(args);
  if (!last_refresh_.time_since_epoch().count()) refreshSoon();  // the first command: learn the map
  dispatch(key ? redisKeySlot(*key) : 0, key.has_value(), std::move(cmd), std::move(cb), 0, nodes_.size());
}

void RedisClient::dispatch(std::uint16_t slot, bool keyed, std::shared_ptr<const std::string> cmd, Callback cb, int hops,
                           std::size_t ask_node) {
  std::size_t at = ask_node;
  if (at >= nodes_.size()) {
    at = keyed ? (*slots_)[slot] : kUnknown;
    if (at == kUnknown || at >= nodes_.size()) {
      // A keyless command, or a slot not known yet: any node that may answer (a keyed
      // one is redirected to its owner).
      at = next_any_++ % nodes_.size();
      for (std::size_t i = 0; i < nodes_.size() && !nodes_[at].conn->usable(); ++i) at = (at + 1) % nodes_.size();
    }
  }
  RedisConnection& conn = *nodes_[at].conn;
  if (ask_node < nodes_.size()) conn.sendFormatted("*1\r\n$6\r\nASKING\r\n", [](std::optional<RedisReply>) {});
  conn.sendFormatted(*cmd, [self = shared_from_this(), slot, keyed, cmd, cb = std::move(cb), hops, at](std::optional<RedisReply> r) mutable {
    if (r && r->isError() && hops < kMaxRedirects) {
      const bool moved = r->str.rfind("MOVED ", 0) == 0, ask = r->str.rfind("ASK ", 0) == 0;
      std::uint16_t to_slot = 0, port = 0;
      std::string host;
      if ((moved || ask) && parseRedirect(r->str, to_slot, host, port)) {
        if (host.empty() || host == "?") host = self->nodes_[at].address.substr(0, self->nodes_[at].address.rfind(':'));
        const std::size_t target = self->nodeAt(host, port);
        if (moved) {
          (*self->slots_)[to_slot] = static_cast<std::uint16_t>(target);
          self->refreshSoon();  // one slot moved: others probably did too
          self->dispatch(to_slot, true, std::move(cmd), std::move(cb), hops + 1, self->nodes_.size());
        } else {
          self->dispatch(to_slot, true, std::move(cmd), std::move(cb), hops + 1, target);
        }
        return;
      }
    }
    if (!r) {
      self->last_error_ = self->nodes_[at].conn->lastError();
      self->refreshSoon();  // a node down: a replica may own its slots now
    } else if (r->isError() && r->str.rfind("CLUSTERDOWN", 0) == 0) {
      self->refreshSoon();
    }
    cb(std::move(r));
  });
}

void RedisClient::refreshSoon() {
  const auto now = std::chrono::steady_clock::now();
  if (refreshing_ || now - last_refresh_ < kRefreshEvery) return;
  refreshSlots([](bool) {});
}

void RedisClient::refreshSlots(std::function<void(bool)> done) {
  if (single_) return done(true);
  refreshing_ = true;
  last_refresh_ = std::chrono::steady_clock::now();
  askSlots(next_any_++ % nodes_.size(), 0, std::move(done));
}

void RedisClient::askSlots(std::size_t first, std::size_t tried, std::function<void(bool)> done) {
  if (tried >= nodes_.size()) {
    refreshing_ = false;
    return done(false);
  }
  const std::size_t at = (first + tried) % nodes_.size();
  nodes_[at].conn->send({"CLUSTER", "SLOTS"}, [self = shared_from_this(), first, tried, at, done = std::move(done)](std::optional<RedisReply> r) mutable {
    if (r && self->applySlots(*r, at)) {
      self->refreshing_ = false;
      return done(true);
    }
    self->askSlots(first, tried + 1, std::move(done));
  });
}

// CLUSTER SLOTS: [[start, end, [host, port, id, ...], replicas...], ...]. The whole map
// is checked before any of it is used: a malformed answer changes nothing.
bool RedisClient::applySlots(const RedisReply& r, std::size_t from) {
  if (r.type != RedisReply::Type::Array || r.elements.empty()) return false;
  struct Range {
    long long start, end;
    std::string host;
    std::uint16_t port;
  };
  std::vector<Range> ranges;
  for (const auto& e : r.elements) {
    if (e.type != RedisReply::Type::Array || e.elements.size() < 3) return false;
    const auto& s = e.elements[0];
    const auto& en = e.elements[1];
    const auto& m = e.elements[2];
    if (s.type != RedisReply::Type::Integer || en.type != RedisReply::Type::Integer || m.type != RedisReply::Type::Array ||
        m.elements.size() < 2 || m.elements[0].type != RedisReply::Type::String || m.elements[1].type != RedisReply::Type::Integer)
      return false;
    if (s.integer < 0 || en.integer >= kRedisSlots || s.integer > en.integer) return false;
    if (m.elements[1].integer <= 0 || m.elements[1].integer > 65535) return false;
    std::string host = m.elements[0].str;
    if (host.empty() || host == "?") host = nodes_[from].address.substr(0, nodes_[from].address.rfind(':'));
    ranges.push_back({s.integer, en.integer, std::move(host), static_cast<std::uint16_t>(m.elements[1].integer)});
  }
  for (auto& n : nodes_) n.master = false;
  for (const auto& range : ranges) {
    const std::size_t node = nodeAt(range.host, range.port);
    nodes_[node].master = true;
    std::fill(slots_->begin() + range.start, slots_->begin() + range.end + 1, static_cast<std::uint16_t>(node));
  }
  return true;
}

}  // namespace tahua
