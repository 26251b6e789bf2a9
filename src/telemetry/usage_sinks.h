// Where usage records go: a JSON-lines file (rotated), a Redis stream, an HTTP
// webhook, a SQLite or PostgreSQL ledger (ledger/ledger.h). Each runs on the UsageExporter's thread only and may block there (bounded
// by its own timeout). A Kafka sink is not here: Debian has librdkafka but no broker to
// test it against (docs/observability.md).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "config/telemetry_config.h"

namespace tahua {

class UsageSink {
 public:
  virtual ~UsageSink() = default;
  // Delivers `lines` (whole records, each ended by '\n'). True when every one of them
  // was taken; on false the caller delivers them all again later (at least once: a
  // consumer deduplicates by record_id).
  virtual bool deliver(std::string_view lines, std::string& error) = 0;
  // Housekeeping between deliveries, at most every 250 ms (a ledger's retention).
  virtual void tick() {}
};

// nullptr and `error` for a sink that cannot be made (a malformed URL). A redis_stream
// sink's url and credentials are filled in by the config loader (the store's by default).
std::unique_ptr<UsageSink> makeUsageSink(const UsageSinkConfig& config, std::string& error);

}  // namespace tahua
