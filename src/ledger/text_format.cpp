#include "ledger/text_format.h"

#include <cmath>
#include <cstdio>
#include <ctime>

namespace tahua::ledger {
namespace {

int hexValue(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

constexpr char kBase64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

}  // namespace

std::string percentDecode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hexValue(s[i + 1]) >= 0 && hexValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hexValue(s[i + 1]) * 16 + hexValue(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i] == '+' ? ' ' : s[i]);
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> queryParams(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    out.emplace_back(percentDecode(pair.substr(0, eq)), eq == std::string_view::npos ? std::string() : percentDecode(pair.substr(eq + 1)));
  }
  return out;
}

void jsonString(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

void appendJsonRow(std::string& out, const Table& t, std::size_t row) {
  out.push_back('{');
  const auto& cells = t.rows[row];
  for (std::size_t i = 0; i < t.columns.size(); ++i) {
    if (i) out.push_back(',');
    jsonString(out, t.columns[i].name);
    out.push_back(':');
    if (i >= cells.size() || !cells[i]) out += "null";
    else if (t.columns[i].kind == Table::Kind::Literal) out += *cells[i];
    else jsonString(out, *cells[i]);
  }
  out.push_back('}');
}

void appendJsonRows(std::string& out, const Table& t) {
  out.push_back('[');
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    if (r) out.push_back(',');
    appendJsonRow(out, t, r);
  }
  out.push_back(']');
}

void appendCsvCell(std::string& out, std::string_view cell, bool text) {
  const bool formula = text && !cell.empty() &&
                       (cell[0] == '=' || cell[0] == '+' || cell[0] == '-' || cell[0] == '@' || cell[0] == '\t' || cell[0] == '\r');
  const bool quote = cell.find_first_of(",\"\r\n") != std::string_view::npos;
  if (quote) out.push_back('"');
  if (formula) out.push_back('\'');
  for (char c : cell) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  if (quote) out.push_back('"');
}

std::string tableCsv(const Table& t) {
  std::string out;
  for (std::size_t i = 0; i < t.columns.size(); ++i) {
    if (i) out.push_back(',');
    appendCsvCell(out, t.columns[i].name, true);
  }
  out += "\r\n";
  for (const auto& cells : t.rows) {
    for (std::size_t i = 0; i < t.columns.size(); ++i) {
      if (i) out.push_back(',');
      if (i < cells.size() && cells[i]) appendCsvCell(out, *cells[i], t.columns[i].kind == Table::Kind::Text);
    }
    out += "\r\n";
  }
  return out;
}

std::string base64Url(std::string_view bytes) {
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(kBase64Url[(v >> s) & 63]);
  }
  if (i < bytes.size()) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out.push_back(kBase64Url[(v >> 18) & 63]);
    out.push_back(kBase64Url[(v >> 12) & 63]);
    if (i + 1 < bytes.size()) out.push_back(kBase64Url[(v >> 6) & 63]);
  }
  return out;
}

std::optional<std::string> unbase64Url(std::string_view text) {
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  unsigned v = 0;
  int bits = 0;
  for (char c : text) {
    const char* at = c ? std::char_traits<char>::find(kBase64Url, 64, c) : nullptr;
    if (!at) return std::nullopt;
    v = (v << 6) | static_cast<unsigned>(at - kBase64Url);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((v >> bits) & 0xff));
    }
  }
  return out;
}

std::optional<long long> isoToMillis(std::string_view iso) {
  // YYYY-MM-DDTHH:MM:SS.mmmZ exactly
  if (iso.size() != 24 || iso[4] != '-' || iso[7] != '-' || iso[10] != 'T' || iso[13] != ':' || iso[16] != ':' || iso[19] != '.' ||
      iso[23] != 'Z')
    return std::nullopt;
  auto num = [&](std::size_t at, std::size_t n) -> int {
    int v = 0;
    for (std::size_t i = at; i < at + n; ++i) {
      if (iso[i] < '0' || iso[i] > '9') return -1;
      v = v * 10 + (iso[i] - '0');
    }
    return v;
  };
  std::tm tm{};
  tm.tm_year = num(0, 4) - 1900;
  tm.tm_mon = num(5, 2) - 1;
  tm.tm_mday = num(8, 2);
  tm.tm_hour = num(11, 2);
  tm.tm_min = num(14, 2);
  tm.tm_sec = num(17, 2);
  const int ms = num(20, 3);
  if (tm.tm_year < -1899 || tm.tm_mon < 0 || tm.tm_mday < 1 || tm.tm_hour < 0 || tm.tm_min < 0 || tm.tm_sec < 0 || ms < 0)
    return std::nullopt;
  return static_cast<long long>(timegm(&tm)) * 1000 + ms;
}

std::string millisToIso(long long ms) {
  const std::time_t secs = static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, static_cast<int>(((ms % 1000) + 1000) % 1000));
  return buf;
}

std::string formatMillis(double ms) {
  if (!std::isfinite(ms)) return "null";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f", ms);
  std::string s = buf;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

}  // namespace tahua::ledger
