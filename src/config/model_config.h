// The `models` section (models_section.cpp): deployments, balancing, canary, outlier
// ejection, GPU scoring, pricing and fallbacks; and `discovery`, where the DNS
// discovery of deployments asks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/cache_config.h"
#include "core/duration.h"

namespace tahua {

// USD per million tokens; a model without prices has no cost.
struct Pricing {
  bool set = false;
  double input = 0;         // uncached prompt tokens
  double output = 0;        // completion tokens
  double cached_input = 0;  // prompt tokens read from the provider's cache (defaults to `input`)
  double per_image = 0;     // USD per image made (/v1/images/generations), besides any tokens
  double per_audio_second = 0;  // USD per second of audio transcribed or translated
  double per_character = 0;     // USD per character of text spoken (/v1/audio/speech)
  double batch_input = -1;      // USD per million tokens in a batch (-1: `input`)
  double batch_output = -1;     // USD per million tokens in a batch (-1: `output`)
};

// Where DNS discovery asks (deployments' `dns`): resolvers as host:port ("[::1]:53");
// none: the system's (/etc/resolv.conf).
struct DiscoveryConfig {
  std::vector<std::string> resolvers;
  Millis timeout{2'000};  // per query try (two tries)
};

// One place a model is served: a provider plus the name the upstream knows it by, with
// the metadata routing decides on (see docs/routing.md).
// A deployment whose endpoints are a DNS name's records (discovery/dns_discovery.h):
// each address becomes an endpoint of its own, re-resolved after the records' TTL.
struct DnsDiscoveryConfig {
  std::string name;  // e.g. vllm.default.svc.cluster.local (a headless Service)
  enum class Type { A, AAAA, SRV };
  Type type = Type::A;
  std::uint16_t port = 0;      // A/AAAA: the endpoints' port (0: the provider base_url's)
  Millis min_ttl{5'000};       // the records' TTL, bounded (nginx's resolver valid=)
  Millis max_ttl{60'000};
  Millis slow_start{0};        // a new endpoint's weight ramps up from 10 % over this
  bool keep_on_empty = true;   // an empty answer keeps the endpoints there are (false: none)
};

struct DeploymentConfig {
  // What every routing decision reads comes first, so it shares one cache line.
  std::uint32_t weight = 100;  // relative share under weighted policies; 0 = only when pinned
  bool canary = false;         // version == its model's canary.version (precomputed)
  float ramp = 1;              // a discovered endpoint in its slow start: 0.1 .. 1 (its weight is ramped too)
  std::size_t index = 0;       // position among all deployments of the config (state slots)
  std::size_t provider_index = 0;
  std::string id;              // unique within its model; default: the provider's name
  std::string provider;
  std::string upstream_model;  // Azure: deployment name; Bedrock: model id
  std::string version = "stable";
  std::vector<std::pair<std::string, std::string>> labels;  // region, zone, anything
  std::string node;            // inference node id its status reports use; default: id
  // Endpoints from DNS: the deployment stands for all of them (the config's view); the
  // config in force has one deployment per endpoint instead (source "dns").
  std::shared_ptr<const DnsDiscoveryConfig> dns;
  std::string address;           // an endpoint's: connect to this ip:port; the provider's host stays Host and TLS name
  std::string source = "config";  // config | dns
};

struct Config;
// Gives every deployment of every model, then of the files and mcp targets, its state slot
// (DeploymentConfig::index) and sets deployment_count. After anything that changes
// the deployments (the loader, discovery).
void numberDeployments(Config& config);

struct ModelConfig;
// Sets each deployment's `canary` flag from the model's canary section and builds the
// pick tables below (the loader does this; code building configs by hand must too).
void markCanaryDeployments(ModelConfig& model);

// The deployments of one version subset that have weight, with cumulative weights, so
// a healthy group is picked from in O(log n) (see Balancer::pick).
struct PickTable {
  std::vector<std::uint32_t> index;   // into ModelConfig::deployments
  std::vector<std::uint64_t> cumulative;
};

enum class BalancePolicy { WeightedRandom, RoundRobin, LeastOutstanding, Latency, GpuAware };

std::string_view balancePolicyName(BalancePolicy p);

// Splits a model's traffic between its stable and canary versions.
struct CanaryConfig {
  bool enabled = false;
  std::string version = "canary";  // deployments with this version form the canary subset
  double percent = 0;              // share of requests (0..100) sent to the canary
  // The key a request is hashed on so a user stays on one side: a header (e.g.
  // x-user-id); empty = the client's API key. No key: random per request.
  std::string sticky_header;
  // sticky_by: tenant hashes (and matches `allow` against) the caller's tenant name.
  bool sticky_by_tenant = false;
  std::vector<std::string> allow;  // key values (user ids) always sent to the canary
};

// Passive outlier ejection from observed failures (5xx, connect errors, timeouts).
struct OutlierConfig {
  int consecutive_failures = 5;  // 0 = off
  // Error rate over a time window: at least `min_requests` calls in `interval`, of which
  // `error_rate` % or more failed. error_rate 0 = off.
  int error_rate = 0;
  Millis interval{60'000};
  int min_requests = 10;
  Millis eject_for{30'000};      // first ejection; doubles for each repeat, up to max
  Millis max_eject_for{300'000};
};

// GPU-aware scoring of reported node status (defaults from the seeds): load score =
// util*gpu_util + mem*gpu_memory + conns/connections_scale*connections +
// queued/queue_scale*queue, times degraded_factor when DEGRADED; lower is better.
struct GpuScoreConfig {
  double gpu_util = 40;
  double gpu_memory = 30;
  double connections = 20;
  double connections_scale = 10;
  double queue = 10;
  double queue_scale = 5;
  double degraded_factor = 1.5;
  double eject_score = 90;  // a node scoring above this gets no traffic (unless all do)
  // Traffic over the best nodes by weighted random: rank k gets split[k] (relative; the
  // seed's 60/30/10), over the first `top` ranks (default: every share of the split).
  std::vector<double> split{60, 30, 10};
  int top = 3;
  Millis status_ttl{15'000};  // a report older than this is ignored
};

struct ModelConfig {
  std::string name;
  CachePolicy cache;  // the model's own `cache`, else cache's defaults
  // Share (0..100) of this model's traffic sent straight to its first fallback. Never
  // from the file: set by a self-healing rule (shift_to_fallback) while it is active.
  double shift_percent = 0;
  std::vector<DeploymentConfig> deployments;  // at least one
  BalancePolicy balancing = BalancePolicy::WeightedRandom;
  CanaryConfig canary;
  OutlierConfig outlier;
  GpuScoreConfig gpu;
  Pricing pricing;
  PickTable stable_table;  // every deployment when there is no canary section
  PickTable canary_table;
  // Failover: when every deployment of this model failed (or is open/ejected) before
  // anything reached the client, these models are tried in order.
  std::vector<std::string> fallbacks;
  std::vector<std::size_t> fallback_indices;  // into Config::models
  std::vector<int> fallback_on{429, 500, 502, 503, 504};  // upstream statuses that fail over
  // When everything failed: answer with this, marked (X-Tahua-Fallback, is_fallback).
  bool fallback_response = false;
  std::string fallback_message;
  int fallback_status = 503;
};

}  // namespace tahua
