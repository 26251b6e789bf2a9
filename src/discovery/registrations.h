// Endpoints that register themselves (an inference server, or an agent beside it):
// `PUT /admin/v1/endpoints/{model}/{id}` with its address, version and labels, kept
// while it is renewed within its TTL (admin/endpoint_admin.h). Each is a deployment of
// its model (source "registration") in the config the gateway publishes, so canaries
// can pick it by version and the balancer sees it like any other. With a shared store
// every replica sees every registration.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"

namespace tahua {

struct Registration {
  std::string model, id;
  std::string address;  // host:port the gateway connects to
  std::string provider;  // whose API, auth and timeouts it speaks
  std::string upstream_model;
  std::string version = "stable";
  std::vector<std::pair<std::string, std::string>> labels;
  std::uint32_t weight = 100;
  std::chrono::system_clock::time_point expires;  // wall clock: every replica agrees
};

// From the admin API's JSON body (`model`, `id` from the path; `ttl` bounds the expiry)
// checked against `config`: the model and provider must exist. An error text on failure.
std::optional<std::string> registrationFromJson(std::string_view json, const Config& config, std::string model, std::string id,
                                                std::chrono::system_clock::time_point now, Registration& out);
// As the shared store keeps it (and back; nullopt: not a registration).
std::string registrationToJson(const Registration& r);
std::optional<Registration> registrationFromRecord(std::string_view id, std::string_view json);

// Adds each registration not expired at `now` to its model as a deployment; one whose
// model is gone, or whose id the model already has, is skipped. Indexes and pick tables
// rebuilt. The earliest expiry still to come, if any, for the caller's timer.
std::optional<std::chrono::system_clock::time_point> addRegistrations(Config& config, const std::vector<Registration>& list,
                                                                      std::chrono::system_clock::time_point now);

}  // namespace tahua
