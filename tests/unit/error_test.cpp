#include "core/error.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace tahua {

TEST(Error, JsonHasOpenAIShape) {
  Error e{ErrorKind::ModelNotFound, "The model 'x\"y' does not exist."};
  auto v = boost::json::parse(e.toJson());
  const auto& err = v.at("error").as_object();
  EXPECT_EQ(err.at("message").as_string(), "The model 'x\"y' does not exist.");
  EXPECT_EQ(err.at("type").as_string(), "invalid_request_error");
  EXPECT_EQ(err.at("code").as_string(), "model_not_found");
  EXPECT_TRUE(err.at("param").is_null());
}

TEST(Error, StatusesMatchTheDocumentedTable) {
  struct Row {
    ErrorKind kind;
    int status;
    const char* code;
  };
  const Row rows[] = {
      {ErrorKind::InvalidJson, 400, "invalid_json"},
      {ErrorKind::MissingModel, 400, "missing_model"},
      {ErrorKind::ModelNotFound, 404, "model_not_found"},
      {ErrorKind::UnknownPath, 404, "unknown_url"},
      {ErrorKind::MethodNotAllowed, 405, "method_not_allowed"},
      {ErrorKind::BodyTooLarge, 413, "request_too_large"},
      {ErrorKind::HeadersTooLarge, 431, "headers_too_large"},
      {ErrorKind::BadHttp, 400, "bad_request"},
      {ErrorKind::ProviderUnavailable, 503, "provider_unavailable"},
      {ErrorKind::UpstreamConnect, 502, "upstream_unreachable"},
      {ErrorKind::UpstreamTls, 502, "upstream_tls_error"},
      {ErrorKind::UpstreamTimeout, 504, "upstream_timeout"},
      {ErrorKind::UpstreamBadResponse, 502, "upstream_bad_response"},
      {ErrorKind::UpstreamInterrupted, 502, "upstream_stream_interrupted"},
      {ErrorKind::Draining, 503, "gateway_draining"},
      {ErrorKind::Overloaded, 503, "gateway_overloaded"},
      {ErrorKind::ConcurrencyLimited, 429, "concurrency_limit_exceeded"},
  };
  for (const auto& r : rows) {
    Error e{r.kind, "m"};
    EXPECT_EQ(e.httpStatus(), r.status) << r.code;
    EXPECT_EQ(e.code(), r.code);
  }
}

TEST(Error, SourceDecidesTypeAndRetryability) {
  EXPECT_EQ((Error{ErrorKind::UpstreamTimeout, ""}).type(), "upstream_error");
  EXPECT_EQ((Error{ErrorKind::Internal, ""}).type(), "server_error");
  EXPECT_TRUE((Error{ErrorKind::UpstreamConnect, ""}).retryable());
  EXPECT_FALSE((Error{ErrorKind::UpstreamInterrupted, ""}).retryable());
  EXPECT_FALSE((Error{ErrorKind::InvalidJson, ""}).retryable());
}

// The error tables of docs/errors.md (the request table with statuses, the mid-stream
// table) and the binary must agree: every documented code is one the gateway sends, with the
// documented status, and every code the gateway sends is documented.
std::vector<std::string> tableCells(const std::string& row) {
  std::vector<std::string> cells;
  std::string cell;
  for (std::size_t i = 1; i < row.size(); ++i) {  // after the leading '|'
    if (row[i] == '\\' && i + 1 < row.size() && row[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (row[i] == '|') {
      cells.push_back(cell);
      cell.clear();
    } else {
      cell += row[i];
    }
  }
  return cells;
}

// `codes` in a cell, outside parentheses (which hold types and headers: `rate_limit_error`).
std::vector<std::string> codesIn(const std::string& cell) {
  std::string outside;
  int depth = 0;
  for (char c : cell) {
    if (c == '(') ++depth;
    else if (c == ')') depth = std::max(0, depth - 1);
    else if (depth == 0) outside += c;
  }
  std::vector<std::string> codes;
  static const std::regex code("`([a-z_]+)`");
  for (std::sregex_iterator it(outside.begin(), outside.end(), code), end; it != end; ++it) codes.push_back((*it)[1]);
  return codes;
}

TEST(Error, TheErrorsPageDocumentsEveryCodeWithItsStatus) {
  std::ifstream in("docs/errors.md");
  ASSERT_TRUE(in) << "docs/errors.md (tests run from the repository root)";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string page = ss.str();
  const auto from = page.find("The `code` values");  // to the end of the page: both tables
  ASSERT_NE(from, std::string::npos);
  std::vector<std::string> lines;
  std::istringstream section(page.substr(from));
  for (std::string line; std::getline(section, line);) lines.push_back(line);

  std::map<std::string, ErrorKind> kinds;
  for (int k = 0; k <= static_cast<int>(ErrorKind::Internal); ++k) {
    const Error e{static_cast<ErrorKind>(k), ""};
    kinds.emplace(std::string(e.code()), e.kind);
  }
  std::set<std::string> documented;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& row = lines[i];
    const bool header = i + 1 < lines.size() && lines[i + 1].rfind("|---", 0) == 0;
    if (row.rfind("|", 0) != 0 || row.rfind("|---", 0) == 0 || header) continue;
    const auto cells = tableCells(row);
    ASSERT_GE(cells.size(), 2u) << row;
    const auto codes = codesIn(cells.back());
    EXPECT_FALSE(codes.empty()) << "a row without a code: " << row;
    for (const auto& code : codes) {
      auto it = kinds.find(code);
      if (it == kinds.end()) {
        ADD_FAILURE() << "docs/errors.md documents `" << code << "`, which the gateway never sends: " << row;
        continue;
      }
      documented.insert(code);
      if (cells.size() == 3) {  // case | status | code
        EXPECT_EQ(std::to_string(Error{it->second, ""}.httpStatus()), std::regex_replace(cells[1], std::regex("\\s"), ""))
            << code << ": " << row;
      }
    }
  }
  for (const auto& [code, kind] : kinds) EXPECT_TRUE(documented.count(code)) << "`" << code << "` is not in the error tables of docs/errors.md";
}

}  // namespace tahua
