// The spend ledger's tables (docs/ledger.md), in SQLite and in PostgreSQL: the
// migrations that make them, one list per database and version, and what a start does
// with a database it finds at some version. Free of the database libraries: the unit
// tests read it, and sqlite_ledger.cpp / postgres_ledger.cpp run it.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace tahua::ledger {

enum class Dialect { Sqlite, Postgres };

// The version this binary writes. A migration is appended for each change, never edited:
// a database at version N is brought to kSchemaVersion by the steps after N.
inline constexpr int kSchemaVersion = 2;  // 2: the per-hour rollups (ledger_rollups.h)

// Which version a database holds is the highest row of this table (one row per step
// applied, with when and by which tahua).
inline constexpr std::string_view kVersionTable = "tahua_ledger_schema";
inline constexpr std::string_view kRecordsTable = "tahua_usage_records";

// The statements that take a database from version - 1 to `version` (1 ..
// kSchemaVersion), run in one transaction under the migration lock. Empty for a version
// this binary does not know.
std::span<const std::string_view> migrationStep(Dialect d, int version);

struct MigrationPlan {
  enum class Action { UpToDate, Migrate, TooNew };
  Action action = Action::UpToDate;
  int from = 0;  // the database's version (0: empty)
  int to = 0;
};
// What to do with a database at `found` (0: no ledger tables yet) for a binary at `binary`.
MigrationPlan planMigration(int found, int binary = kSchemaVersion);
// The error for a database this binary must not write: it names both versions and what to do.
std::string tooNewError(std::string_view where, int found, int binary = kSchemaVersion);

// The columns of the records table, in the order of the insert statements; the record's
// field of the same name fills each (cost_usd: SQLite's cost_nano_usd, see ledger_record.h).
std::span<const std::string_view> recordColumns(Dialect d);

}  // namespace tahua::ledger
