// The gateway's own sections (server_sections.cpp): `server` (connections, bodies,
// timeouts, uploads), `listeners`, `limits` (the gateway-wide concurrency caps) and
// `admin` (the admin API's listener and tokens).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/duration.h"

namespace tahua {

struct ServerTlsConfig {
  std::string cert_file;
  std::string key_file;
};

struct ListenerConfig {
  std::string address = "127.0.0.1";
  std::uint16_t port = 8080;
  std::optional<ServerTlsConfig> tls;
};

// Uploads (multipart/form-data bodies: audio, image edits, files): spooled to an unnamed
// temporary file as they arrive, never held in memory, and sent on from there.
struct UploadConfig {
  std::string spool_dir;            // empty: $TMPDIR, else /tmp
  Millis timeout{600'000};          // to read one upload's body
  std::size_t max_text_bytes = 64 * 1024;  // the form's text fields together
  // Per path (the model, and so the route, is only known from the body): paths not
  // listed take `default_max_bytes`.
  std::uint64_t default_max_bytes = 100ull << 20;
  std::vector<std::pair<std::string, std::uint64_t>> max_bytes{{"/v1/files", 512ull << 20}};
  std::uint64_t limitFor(std::string_view path) const {
    for (const auto& [p, n] : max_bytes)
      if (p == path) return n;
    return default_max_bytes;
  }
};

struct ServerConfig {
  unsigned workers = 0;  // 0 = one per core
  std::size_t max_connections = 65536;  // client connections per process (split over workers)
  std::size_t max_header_bytes = 16 * 1024;
  std::size_t max_body_bytes = 16 * 1024 * 1024;
  std::size_t max_response_bytes = 64 * 1024 * 1024;
  Millis header_timeout{10'000};
  Millis body_timeout{60'000};
  Millis keepalive_timeout{75'000};
  Millis client_write_timeout{60'000};
  // An answer given before the request's body was read (an upload refused at its
  // headers, a body over its limit) is followed by reading and discarding what the
  // client still sends, so its stack sees the answer and not a reset (nginx's lingering
  // close): for at most lingering_time in all, lingering_timeout per read, and
  // lingering_max_bytes.
  Millis lingering_time{30'000};
  Millis lingering_timeout{5'000};
  std::uint64_t lingering_max_bytes = 1ull << 30;
  Millis drain_timeout{30'000};
  Millis drain_accept_grace{0};  // after SIGTERM keep accepting this long (readyz already 503)
  Millis stream_heartbeat{15'000};  // SSE comment on a stream idle this long; 0 = off
  // A stream's bytes read from upstream but not yet taken by a slow client; past this
  // the stream ends with a stream_buffer_overflow event and the upstream is cancelled.
  std::size_t stream_buffer_bytes = 256 * 1024;
  // The longest event (and so the longest line) an upstream stream may send; past it the
  // stream ends with upstream_event_too_large (the upstream's fault, not the client's).
  std::size_t max_stream_event_bytes = 1024 * 1024;
  std::size_t max_url_bytes = 8 * 1024;  // request target; over it: 414
  std::size_t max_json_depth = 128;      // nesting of a request body; deeper: 400
  bool deployment_header = false;  // X-Tahua-Deployment / X-Tahua-Version on answers
  bool tenant_metrics = false;     // per-tenant series in /metrics (bounded: 1,000 tenants)
  // server.readiness.require_models: /readyz is 503 unless each of these models has a
  // deployment this worker would pick (its provider usable, not ejected, its breaker not
  // open). Empty by default: an upstream outage must not take every replica out at once.
  std::vector<std::string> ready_models;
  UploadConfig uploads;
  // Realtime sessions (WebSockets): closed after this long without a frame either way,
  // or this long in all; one frame (a message) at most this large.
  Millis realtime_idle_timeout{600'000};
  Millis realtime_max_duration{3'600'000};
  std::size_t realtime_max_frame_bytes = 16 * 1024 * 1024;
};

// Concurrency caps for the whole gateway (0 = none); routes may have their own. Over a
// cap a request is refused with 429, or waits up to queue_timeout for a slot (in line
// with at most max_queue others per cap). Per tenant/key caps come with tenants.
struct LimitsConfig {
  std::size_t max_concurrent_requests = 0;
  std::size_t max_concurrent_streams = 0;
  Millis queue_timeout{0};      // 0 = refuse at once
  std::size_t max_queue = 1000;  // waiters per cap; beyond it: 429 at once
};

// The admin API (/admin/v1/...): its own listener, never the public one, and a bearer
// token. Disabled unless both are configured.
// A token that manages one tenant's keys through the admin API (and nothing else).
struct TenantAdminToken {
  std::string name;  // who acted, in the audit trail
  std::string tenant;
  std::array<unsigned char, 32> sha256{};  // only the hash is configured
};

// A named token of the admin API with the admin token's rights (admin.tokens): kept as
// its SHA-256 (configured so, or hashed at load from an environment variable).
struct GlobalAdminToken {
  std::string name;  // who acted, in the audit log
  std::array<unsigned char, 32> sha256{};
};

struct AdminConfig {
  bool enabled = false;
  ListenerConfig listener;
  std::string token;      // secret; named "admin" in the audit log
  std::string token_env;  // where it came from, for messages
  std::vector<GlobalAdminToken> tokens;
  std::vector<TenantAdminToken> tenant_tokens;
  std::size_t audit_entries = 10'000;  // the audit log keeps the newest this many
};

}  // namespace tahua
