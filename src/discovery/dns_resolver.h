// A DNS client for upstream discovery: A, AAAA and SRV lookups with the records' TTLs,
// against the system's resolvers or configured ones (host:port, so a test's dnsmasq on
// a loopback port works), by c-ares (Debian's libc-ares). Asio's resolver is not used:
// getaddrinfo gives no TTLs, no SRV records and no choice of server.
//
// Blocking: resolve() waits for its answer (bounded by the timeout and tries). It runs
// only on the discovery thread (discovery/dns_discovery.h), never on a worker.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tahua {

struct DnsRecord {
  std::string ip;          // textual address
  std::uint16_t port = 0;  // SRV's; for A/AAAA the caller's
  std::uint32_t weight = 1;  // SRV's weight (0 counts as 1), else 1
};

struct DnsAnswer {
  enum class Status { Ok, Empty, Failed };
  Status status = Status::Failed;  // Empty: the name has no such records (NXDOMAIN, NODATA)
  std::vector<DnsRecord> records;
  std::chrono::seconds ttl{0};     // the smallest record TTL
  std::string error;               // Failed: why (timeout, refused, SERVFAIL, ...)
};

class DnsResolver {
 public:
  enum class Type { A, AAAA, SRV };
  // `servers`: "host:port" (IPv6 as "[::1]:53"); empty: the system's (/etc/resolv.conf).
  // An error text on `error` when c-ares cannot start or a server is malformed.
  DnsResolver(const std::vector<std::string>& servers, std::chrono::milliseconds timeout, std::string& error);
  ~DnsResolver();
  DnsResolver(const DnsResolver&) = delete;
  DnsResolver& operator=(const DnsResolver&) = delete;

  // A/AAAA: every address, each with `port`. SRV: the records of the lowest priority,
  // each target resolved to its addresses (A) with the SRV port and weight.
  DnsAnswer resolve(const std::string& name, Type type, std::uint16_t port);

 private:
  struct Channel;
  DnsAnswer query(const std::string& name, Type type, std::uint16_t port);
  std::unique_ptr<Channel> channel_;
};

}  // namespace tahua
