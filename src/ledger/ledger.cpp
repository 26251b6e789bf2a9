// The ledger's kinds and `tahua --migrate`.
#include <cstdio>

#include "ledger/ledger.h"
#include "ledger/ledger_schema.h"

namespace tahua::ledger {
namespace {

const char* typeName(UsageSinkConfig::Type t) { return t == UsageSinkConfig::Type::Sqlite ? "sqlite" : "postgres"; }

}  // namespace

std::unique_ptr<Ledger> makeLedger(const UsageSinkConfig& c) {
  return c.type == UsageSinkConfig::Type::Sqlite ? makeSqliteLedger(c) : makePostgresLedger(c);
}


int migrateLedgers(const UsageConfig& usage) {
  int status = 0, ledgers = 0;
  for (const auto& c : usage.sinks) {
    if (c.type != UsageSinkConfig::Type::Sqlite && c.type != UsageSinkConfig::Type::Postgres) continue;
    ++ledgers;
    auto ledger = makeLedger(c);
    std::string error;
    if (ledger->open(error) != Ledger::Opened::Ok) {
      std::fprintf(stderr, "tahua: --migrate: usage sink %s (%s): %s\n", c.name.c_str(), typeName(c.type), error.c_str());
      status = 1;
      continue;
    }
    const int found = ledger->foundVersion();
    if (found == kSchemaVersion)
      std::printf("%s (%s): schema at version %d, nothing to do\n", c.name.c_str(), typeName(c.type), kSchemaVersion);
    else
      std::printf("%s (%s): schema migrated from version %d to %d\n", c.name.c_str(), typeName(c.type), found, kSchemaVersion);
  }
  if (ledgers == 0) {
    std::fprintf(stderr, "tahua: --migrate: the config has no usage sink of type sqlite or postgres (usage.sinks[].type)\n");
    return 1;
  }
  return status;
}

}  // namespace tahua::ledger
