#include "core/error.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

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

}  // namespace tahua
