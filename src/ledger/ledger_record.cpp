#include "ledger/ledger_record.h"

#include <algorithm>
#include <limits>

#include <simdjson.h>

namespace tahua::ledger {

struct RecordReader::Impl {
  simdjson::ondemand::parser parser;
  simdjson::padded_string buffer;
};

RecordReader::RecordReader() : impl_(new Impl) {}
RecordReader::~RecordReader() { delete impl_; }

bool isUuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < 36; ++i) {
    const char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

std::optional<std::int64_t> decimalToNanos(std::string_view text) {
  // value = digits × 10^exp10, read without a double so that nothing is rounded twice.
  std::size_t i = 0;
  if (i < text.size() && text[i] == '-') return std::nullopt;  // costs are never negative
  std::string digits;
  long exp10 = 0;
  bool any = false, dot = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c >= '0' && c <= '9') {
      any = true;
      if (digits.empty() && c == '0') {  // leading zeros carry nothing
        if (dot) --exp10;
        continue;
      }
      if (digits.size() > 40) return std::nullopt;
      digits.push_back(c);
      if (dot) --exp10;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (!any) return std::nullopt;
  if (i < text.size()) {
    if (text[i] != 'e' && text[i] != 'E') return std::nullopt;
    ++i;
    bool negative = false;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
    long e = 0;
    bool exp_digits = false;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      exp_digits = true;
      if (e < 10000) e = e * 10 + (text[i] - '0');
    }
    if (!exp_digits || i != text.size()) return std::nullopt;
    exp10 += negative ? -e : e;
  }
  if (digits.empty()) return 0;
  exp10 += 9;  // nano-units
  const long keep = static_cast<long>(digits.size()) + exp10;  // digits left of the point
  if (keep > 19) return std::nullopt;
  std::uint64_t v = 0;
  constexpr std::uint64_t kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  for (long k = 0; k < keep; ++k) {
    const int digit = k < static_cast<long>(digits.size()) ? digits[static_cast<std::size_t>(k)] - '0' : 0;
    if (v > (kMax - static_cast<std::uint64_t>(digit)) / 10) return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(digit);
  }
  // Half away from zero: the first digit dropped decides.
  const long first_dropped = std::max(keep, 0L);
  if (keep >= 0 && first_dropped < static_cast<long>(digits.size()) && digits[static_cast<std::size_t>(first_dropped)] >= '5') {
    if (v == kMax) return std::nullopt;
    ++v;
  }
  return static_cast<std::int64_t>(v);
}

namespace {

int columnIndex(std::string_view key) {
  const auto cols = recordColumns(Dialect::Sqlite);
  if (key == "cost_usd") key = "cost_nano_usd";
  for (std::size_t i = 0; i < cols.size(); ++i)
    if (cols[i] == key) return static_cast<int>(i);
  return -1;
}

}  // namespace

bool RecordReader::parse(std::string_view line, ParsedRecord& out, std::string& error) {
  using namespace simdjson;
  static_assert(kColumnCount == 50);
  for (auto& c : out.columns) c = ColumnValue{};
  out.record_id = {};
  out.supersedes = {};
  impl_->buffer = padded_string(line);
  ondemand::document doc;
  ondemand::object obj;
  if (impl_->parser.iterate(impl_->buffer).get(doc) || doc.get_object().get(obj)) {
    error = "not a JSON object";
    return false;
  }
  for (auto field : obj) {
    std::string_view key;
    ondemand::value value;
    if (field.unescaped_key().get(key) || field.value().get(value)) {
      error = "malformed JSON";
      return false;
    }
    const int at = columnIndex(key);
    if (at < 0) continue;  // a field the ledger has no column for (mcp_arguments)
    ColumnValue& col = out.columns[static_cast<std::size_t>(at)];
    ondemand::json_type type;
    if (value.type().get(type)) {
      error = "malformed JSON in \"" + std::string(key) + "\"";
      return false;
    }
    switch (type) {
      case ondemand::json_type::null: break;
      case ondemand::json_type::boolean: {
        bool b = false;
        if (value.get_bool().get(b)) {
          error = "malformed boolean \"" + std::string(key) + "\"";
          return false;
        }
        col.kind = ColumnValue::Kind::Int;
        col.i = b ? 1 : 0;
        break;
      }
      case ondemand::json_type::number: {
        if (key == "cost_usd") {
          std::string_view raw = value.raw_json_token();
          while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t')) raw.remove_suffix(1);
          auto nanos = decimalToNanos(raw);
          if (!nanos) {
            error = "cost_usd is not a non-negative decimal: " + std::string(raw.substr(0, 40));
            return false;
          }
          col.kind = ColumnValue::Kind::Int;
          col.i = *nanos;
          break;
        }
        ondemand::number n;
        if (value.get_number().get(n)) {
          error = "malformed number \"" + std::string(key) + "\"";
          return false;
        }
        if (n.is_int64()) {
          col.kind = ColumnValue::Kind::Int;
          col.i = n.get_int64();
        } else {
          col.kind = ColumnValue::Kind::Real;
          col.d = n.as_double();
        }
        break;
      }
      case ondemand::json_type::string: {
        std::string_view s;
        if (value.get_string().get(s)) {
          error = "malformed string \"" + std::string(key) + "\"";
          return false;
        }
        col.kind = ColumnValue::Kind::Text;
        col.text = s;
        if (key == "record_id") out.record_id = s;
        else if (key == "supersedes") out.supersedes = s;
        break;
      }
      default:
        error = "\"" + std::string(key) + "\" is not a scalar";
        return false;
    }
  }
  if (!isUuid(out.record_id)) {
    error = "no valid record_id";
    return false;
  }
  if (!out.supersedes.empty() && !isUuid(out.supersedes)) {
    error = "supersedes is not a record id";
    return false;
  }
  if (out.columns[2].kind != ColumnValue::Kind::Text || out.columns[3].kind != ColumnValue::Kind::Text) {
    error = "no request_id or ts";
    return false;
  }
  return true;
}

}  // namespace tahua::ledger
