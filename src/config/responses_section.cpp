// Answers kept in the state store: `idempotency` (an Idempotency-Key's stored answer) and
// `responses` (the Responses API's stored responses).
#include "config/loader_detail.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

constexpr Field kIdempotencyFields[] = {
    boolean("enabled", "true",
            "A retry with the same Idempotency-Key from the same caller gets the stored answer "
            "(`x-idempotent-replayed: true`) instead of a second upstream call."),
    duration("ttl", 1'000, "1h", "A completed answer is kept this long."),
    duration("lock_ttl", 1'000, "2m",
             "An answer in progress holds its key this long, renewed while it runs; a retry meanwhile gets 409 "
             "idempotency_in_progress."),
    integer("max_body_bytes", 1024, 256ull << 20, "4194304",
            "A larger answer is not kept (its retries get 409 idempotency_answer_not_kept)."),
};
const Table kIdempotency("idempotency", "Idempotency-Key: a request answered once, its retries replayed.", kIdempotencyFields);

constexpr Field kResponsesFields[] = {
    boolean("store", "true", "false: nothing is kept, whatever a request's `store` says."),
    duration("ttl", 1'000, "30d", "A stored response lives this long."),
    integer("max_bytes_per_tenant", 1024, 1ull << 40, "67108864", "Over it, the tenant's oldest responses go first."),
    choice("scope", "tenant | key", "tenant", "key: one API key never sees another's responses."),
    integer("max_turns", 1, 10'000, "256", "A longer previous_response_id chain is refused (400)."),
};
const Table kResponses("responses",
                       "The Responses API's state, kept by the gateway for the answers it translates "
                       "(previous_response_id, item_reference, GET and DELETE /v1/responses/{id}).",
                       kResponsesFields);

}  // namespace

void Loader::loadIdempotency(const YAML::Node& n, Config& cfg) {
  Fields f(*this, n, "idempotency", kIdempotency);
  IdempotencyConfig& c = cfg.idempotency;
  f.read("enabled", c.enabled);
  f.read("ttl", c.ttl);
  f.read("lock_ttl", c.lock_ttl);
  f.read("max_body_bytes", c.max_body_bytes);
}

void Loader::loadResponses(const YAML::Node& n, Config& cfg) {
  Fields f(*this, n, "responses", kResponses);
  ResponsesConfig& c = cfg.responses;
  f.read("store", c.store);
  f.read("ttl", c.ttl);
  f.read("max_bytes_per_tenant", c.max_bytes_per_tenant);
  if (auto v = f["scope"]) {
    const std::string scope = str(v, f.at("scope"));
    if (scope != "tenant" && scope != "key") fail(v, f.at("scope"), "expected tenant or key");
    c.per_key = scope == "key";
  }
  f.read("max_turns", c.max_turns);
}

}  // namespace tahua::config_detail
