// One usage record (a JSON line, docs/usage-record.schema.json) as the values of the
// ledger's columns, and the exact decimal arithmetic of its cost. Parsed with simdjson
// on the exporter's thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ledger/ledger_schema.h"

namespace tahua::ledger {

inline constexpr std::size_t kColumnCount = 50;

// A column's value as SQLite binds it. Text views point into the parser's buffer: valid
// until the next record is parsed.
struct ColumnValue {
  enum class Kind : std::uint8_t { Null, Int, Real, Text };
  Kind kind = Kind::Null;
  std::int64_t i = 0;
  double d = 0;
  std::string_view text;
};

struct ParsedRecord {
  std::array<ColumnValue, kColumnCount> columns{};  // in recordColumns(Dialect::Sqlite) order
  std::string_view record_id;
  std::string_view supersedes;  // empty: none
};

// Reads records one at a time (its parser and buffers are reused).
class RecordReader {
 public:
  RecordReader();
  ~RecordReader();
  // False, with `error`, for a line that is not a record: not a JSON object, no valid
  // record_id (a UUID), no request_id or ts, a cost that is not a non-negative decimal.
  bool parse(std::string_view line, ParsedRecord& out, std::string& error);

 private:
  struct Impl;
  Impl* impl_;
};

// A decimal number's text ("0.000123", "1.7e-05", "12") in nano-units (1e-9), rounded
// half away from zero; nullopt when it is not a decimal number or does not fit.
std::optional<std::int64_t> decimalToNanos(std::string_view text);

// 8-4-4-4-12 lowercase hex (the record ids the gateway makes).
bool isUuid(std::string_view s);

}  // namespace tahua::ledger
