// A usage sink over a SQLite or PostgreSQL ledger (ledger/ledger.h): each delivery one
// write, rows past `retention` pruned between deliveries.
#pragma once

#include <memory>
#include <string>

#include "config/telemetry_config.h"
#include "telemetry/usage_sinks.h"

namespace tahua {

// Opens the ledger (and so migrates it). nullptr and `error` when the database was
// reached but must not be written (a newer schema, a failed migration) or, for SQLite,
// cannot be opened; a PostgreSQL server not reached yet is a warning: the exporter
// retries and the records spill meanwhile.
std::unique_ptr<UsageSink> makeLedgerSink(const UsageSinkConfig& c, std::string& error);

}  // namespace tahua
