#include "discovery/dns_resolver.h"

#include <ares.h>
#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <poll.h>

#include <algorithm>
#include <limits>
#include <mutex>

namespace tahua {

namespace {

constexpr std::size_t kMaxRecords = 1'000;  // an answer beyond it is cut (a deployment of 1,000 pods is already a lot)
constexpr int kMaxAddrs = 256;                // per A/AAAA answer (a UDP answer holds far fewer)

void initLibrary() {
  static std::once_flag once;
  std::call_once(once, [] { ares_library_init(ARES_LIB_INIT_ALL); });
}

struct Raw {
  bool done = false;
  int status = ARES_SUCCESS;
  std::vector<unsigned char> answer;
};

void onAnswer(void* arg, int status, int /*timeouts*/, unsigned char* abuf, int alen) {
  auto* raw = static_cast<Raw*>(arg);
  raw->done = true;
  raw->status = status;
  if (status == ARES_SUCCESS && abuf && alen > 0) raw->answer.assign(abuf, abuf + alen);
}

std::string statusText(int status) { return ares_strerror(status); }

}  // namespace

struct DnsResolver::Channel {
  ares_channel ch = nullptr;
  ~Channel() {
    if (ch) ares_destroy(ch);
  }
};

DnsResolver::DnsResolver(const std::vector<std::string>& servers, std::chrono::milliseconds timeout, std::string& error)
    : channel_(std::make_unique<Channel>()) {
  initLibrary();
  ares_options opts{};
  opts.timeout = static_cast<int>(std::clamp<long long>(timeout.count(), 1, std::numeric_limits<int>::max()));
  opts.tries = 2;
  int rc = ares_init_options(&channel_->ch, &opts, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
  if (rc != ARES_SUCCESS) {
    error = "cannot start the DNS client: " + statusText(rc);
    channel_->ch = nullptr;
    return;
  }
  if (!servers.empty()) {
    std::string csv;
    for (const auto& s : servers) csv += (csv.empty() ? "" : ",") + s;
    rc = ares_set_servers_ports_csv(channel_->ch, csv.c_str());
    if (rc != ARES_SUCCESS) error = "discovery.resolvers: " + statusText(rc);
  }
}

DnsResolver::~DnsResolver() = default;

DnsAnswer DnsResolver::resolve(const std::string& name, Type type, std::uint16_t port) {
  if (!channel_->ch) return DnsAnswer{DnsAnswer::Status::Failed, {}, {}, "the DNS client did not start"};
  if (type != Type::SRV) return query(name, type, port);
  DnsAnswer srv = query(name, Type::SRV, 0);
  if (srv.status != DnsAnswer::Status::Ok) return srv;
  // Each SRV target to its addresses; the answer's TTL is the smallest of them.
  DnsAnswer out;
  out.status = DnsAnswer::Status::Empty;
  std::chrono::seconds ttl = std::chrono::seconds::max();
  for (const DnsRecord& target : srv.records) {
    DnsAnswer a = query(target.ip, Type::A, target.port);
    if (a.status == DnsAnswer::Status::Failed) return a;
    for (DnsRecord r : a.records) {
      r.weight = target.weight;
      if (out.records.size() < kMaxRecords) out.records.push_back(std::move(r));
    }
    if (a.status == DnsAnswer::Status::Ok) ttl = std::min(ttl, a.ttl);
  }
  if (!out.records.empty()) {
    out.status = DnsAnswer::Status::Ok;
    out.ttl = ttl;
  }
  return out;
}

DnsAnswer DnsResolver::query(const std::string& name, Type type, std::uint16_t port) {
  Raw raw;
  const int qtype = type == Type::A ? ns_t_a : type == Type::AAAA ? ns_t_aaaa : ns_t_srv;
  ares_query(channel_->ch, name.c_str(), ns_c_in, qtype, onAnswer, &raw);
  // c-ares' own loop: the sockets it wants watched, polled until the answer (or its
  // timeout, which c-ares enforces) arrives. poll, not select: a gateway's descriptors
  // go past FD_SETSIZE.
  while (!raw.done) {
    ares_socket_t socks[ARES_GETSOCK_MAXNUM];
    const int bits = ares_getsock(channel_->ch, socks, ARES_GETSOCK_MAXNUM);
    pollfd fds[ARES_GETSOCK_MAXNUM];
    nfds_t n = 0;
    for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
      short events = 0;
      if (ARES_GETSOCK_READABLE(bits, i)) events |= POLLIN;
      if (ARES_GETSOCK_WRITABLE(bits, i)) events |= POLLOUT;
      if (events) fds[n++] = pollfd{socks[i], events, 0};
    }
    timeval tv{};
    timeval* left = ares_timeout(channel_->ch, nullptr, &tv);
    const int ms = left ? static_cast<int>(tv.tv_sec * 1000 + tv.tv_usec / 1000) + 1 : 1000;
    const int ready = poll(fds, n, ms);
    if (ready <= 0) {
      ares_process_fd(channel_->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);  // timeouts
      continue;
    }
    for (nfds_t i = 0; i < n; ++i) {
      const bool r = fds[i].revents & (POLLIN | POLLERR | POLLHUP), w = fds[i].revents & POLLOUT;
      if (r || w) ares_process_fd(channel_->ch, r ? fds[i].fd : ARES_SOCKET_BAD, w ? fds[i].fd : ARES_SOCKET_BAD);
    }
  }

  DnsAnswer out;
  if (raw.status == ARES_ENOTFOUND || raw.status == ARES_ENODATA) {
    out.status = DnsAnswer::Status::Empty;
    return out;
  }
  if (raw.status != ARES_SUCCESS) {
    out.error = statusText(raw.status);
    return out;
  }
  const auto* buf = raw.answer.data();
  const int len = static_cast<int>(raw.answer.size());
  int ttl = std::numeric_limits<int>::max();
  if (type == Type::A) {
    ares_addrttl addrs[kMaxAddrs];
    int count = kMaxAddrs;
    const int rc = ares_parse_a_reply(buf, len, nullptr, addrs, &count);
    if (rc == ARES_ENODATA) return DnsAnswer{DnsAnswer::Status::Empty, {}, {}, {}};
    if (rc != ARES_SUCCESS) return DnsAnswer{DnsAnswer::Status::Failed, {}, {}, "malformed answer: " + statusText(rc)};
    for (int i = 0; i < count; ++i) {
      char text[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &addrs[i].ipaddr, text, sizeof text);
      out.records.push_back({text, port, 1});
      ttl = std::min(ttl, addrs[i].ttl);
    }
  } else if (type == Type::AAAA) {
    ares_addr6ttl addrs[kMaxAddrs];
    int count = kMaxAddrs;
    const int rc = ares_parse_aaaa_reply(buf, len, nullptr, addrs, &count);
    if (rc == ARES_ENODATA) return DnsAnswer{DnsAnswer::Status::Empty, {}, {}, {}};
    if (rc != ARES_SUCCESS) return DnsAnswer{DnsAnswer::Status::Failed, {}, {}, "malformed answer: " + statusText(rc)};
    for (int i = 0; i < count; ++i) {
      char text[INET6_ADDRSTRLEN];
      inet_ntop(AF_INET6, &addrs[i].ip6addr, text, sizeof text);
      out.records.push_back({text, port, 1});
      ttl = std::min(ttl, addrs[i].ttl);
    }
  } else {
    ares_srv_reply* srv = nullptr;
    const int rc = ares_parse_srv_reply(buf, len, &srv);
    if (rc == ARES_ENODATA) return DnsAnswer{DnsAnswer::Status::Empty, {}, {}, {}};
    if (rc != ARES_SUCCESS) return DnsAnswer{DnsAnswer::Status::Failed, {}, {}, "malformed answer: " + statusText(rc)};
    // Only the lowest priority serves (RFC 2782); the others are its backups.
    unsigned best = std::numeric_limits<unsigned>::max();
    for (auto* r = srv; r; r = r->next) best = std::min<unsigned>(best, r->priority);
    for (auto* r = srv; r && out.records.size() < kMaxRecords; r = r->next)
      if (r->priority == best && r->port > 0) out.records.push_back({r->host, r->port, std::max<std::uint32_t>(1, r->weight)});
    ares_free_data(srv);
    ttl = 0;  // c-ares gives no SRV TTL: the targets' A records bound the refresh
  }
  if (out.records.empty()) return DnsAnswer{DnsAnswer::Status::Empty, {}, {}, {}};
  if (out.records.size() > kMaxRecords) out.records.resize(kMaxRecords);
  out.status = DnsAnswer::Status::Ok;
  out.ttl = std::chrono::seconds(std::max(ttl, 0));
  return out;
}

}  // namespace tahua
