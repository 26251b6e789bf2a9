#include "telemetry/metrics.h"

#include <gtest/gtest.h>

namespace tahua {

TEST(Histogram, BucketsAreCumulativeInExposition) {
  WorkerMetrics a;
  auto& s = a.series("m", "p");
  s.duration.observe(0.003);
  s.duration.observe(0.7);
  s.duration.observe(1000);
  ++s.requests_by_status[200];
  std::string text = renderPrometheus(a);
  EXPECT_NE(text.find("tahua_request_duration_seconds_bucket{model=\"m\",provider=\"p\",le=\"0.005\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("tahua_request_duration_seconds_bucket{model=\"m\",provider=\"p\",le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("tahua_request_duration_seconds_bucket{model=\"m\",provider=\"p\",le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("tahua_request_duration_seconds_count{model=\"m\",provider=\"p\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("tahua_requests_total{model=\"m\",provider=\"p\",status=\"200\"} 1\n"), std::string::npos);
}

TEST(WorkerMetrics, MergeAddsEveryWorker) {
  WorkerMetrics a, b, merged;
  ++a.series("m", "p").requests_by_status[200];
  ++b.series("m", "p").requests_by_status[200];
  ++b.series("m", "p").requests_by_status[502];
  b.series("m", "p").completion_tokens = 7;
  a.active_streams = 2;
  b.active_streams = 3;
  ++b.upstream_errors[{"p", "upstream_timeout"}];
  merged.merge(a);
  merged.merge(b);
  std::string text = renderPrometheus(merged);
  EXPECT_NE(text.find("tahua_requests_total{model=\"m\",provider=\"p\",status=\"200\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("tahua_requests_total{model=\"m\",provider=\"p\",status=\"502\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("tahua_tokens_total{model=\"m\",provider=\"p\",type=\"completion\"} 7\n"), std::string::npos);
  EXPECT_NE(text.find("tahua_active_streams 5\n"), std::string::npos);
  EXPECT_NE(text.find("tahua_upstream_errors_total{provider=\"p\",kind=\"upstream_timeout\"} 1\n"), std::string::npos);
}

TEST(WorkerMetrics, LabelValuesAreEscaped) {
  WorkerMetrics a;
  ++a.series("we\"ird\\", "p").requests_by_status[200];
  EXPECT_NE(renderPrometheus(a).find("model=\"we\\\"ird\\\\\""), std::string::npos);
}

}  // namespace tahua
