// The ledger endpoints' text (GET /admin/v1/usage, /admin/v1/requests): query-string
// parameters in; JSON strings, CSV cells, tables and opaque cursors out. Pure; unit
// tested.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tahua::ledger {

// `a%2Cb+c` -> "a,b c".
std::string percentDecode(std::string_view s);
// The name=value pairs of a query string, in order, both percent-decoded (empty pairs skipped).
std::vector<std::pair<std::string, std::string>> queryParams(std::string_view query);

// `s` as a JSON string, quotes included, appended to `out`.
void jsonString(std::string& out, std::string_view s);

// An answer as a table: JSON (an array of objects) or CSV. A Literal cell is emitted as
// is (a JSON number, true or false: text this code made); a Text cell is quoted in JSON
// and, in CSV, neutralised: one beginning with =, +, -, @, a tab or a CR gets a leading
// ' (a spreadsheet opening the file runs no formula), and RFC 4180 quoting when it holds
// a comma, a quote or a line break. A null cell is JSON null, an empty CSV cell.
struct Table {
  enum class Kind { Text, Literal };
  struct Column {
    std::string name;
    Kind kind = Kind::Text;
  };
  std::vector<Column> columns;
  std::vector<std::vector<std::optional<std::string>>> rows;
};
void appendJsonRow(std::string& out, const Table& t, std::size_t row);  // {"name":value,...}
void appendJsonRows(std::string& out, const Table& t);                   // [{...},...]
std::string tableCsv(const Table& t);                                    // header line, then rows; CRLF
void appendCsvCell(std::string& out, std::string_view cell, bool text);

// What an endpoint answers in: JSON, or CSV when the request says `Accept: text/csv`.
enum class AnswerFormat { Json, Csv };

// base64url without padding, and back (nullopt: not base64url).
std::string base64Url(std::string_view bytes);
std::optional<std::string> unbase64Url(std::string_view text);

// "2026-12-05T10:00:00.123Z" <-> milliseconds since the epoch (the format normalizeUtc makes).
std::optional<long long> isoToMillis(std::string_view iso);
std::string millisToIso(long long ms);

// A number of milliseconds as a JSON number with at most 3 decimals ("12.5", "210").
std::string formatMillis(double ms);

}  // namespace tahua::ledger
