// The gateway's own sections: server, listeners, limits and admin.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "config/loader_detail.h"

namespace tahua::config_detail {

namespace {

using namespace schema;

constexpr Field kServerFields[] = {
    integer("workers", 0, 256, "0", "Worker threads, one io_context each; 0: one per core.").atRestart(),
    integer("max_connections", 1, 10'000'000, "65536",
            "Open client connections, split evenly over the workers; over it a new connection gets 503 "
            "gateway_overloaded and is closed (tahua_connections_rejected_total)."),
    integer("max_header_bytes", 1024, 1 << 20, "16384", "Request line and headers; over it: 431."),
    integer("max_url_bytes", 256, 1 << 20, "8192", "The request target; over it: 414."),
    integer("max_json_depth", 8, 1'000, "128", "Nesting of arrays and objects in a request body; deeper: 400."),
    integer("max_body_bytes", 1, 1ull << 30, "16777216",
            "A request body; over it: 413 (uploads have their own: `server.uploads.max_bytes`)."),
    integer("max_response_bytes", 1024, 1ull << 32, "67108864",
            "A non-streamed upstream answer, held whole to read its usage; over it: 502."),
    duration("header_timeout", 1, "10s", "The whole request head must arrive within this (slowloris)."),
    duration("body_timeout", 1, "60s", "The whole request body must arrive within this."),
    duration("keepalive_timeout", 1, "75s", "An idle keep-alive connection is closed after this."),
    duration("client_write_timeout", 1, "60s", "One write to a client may block this long (slow readers)."),
    duration("drain_timeout", 0, "30s", "On SIGTERM: how long requests and streams in flight may finish."),
    duration("drain_accept_grace", 0, "0s",
             "On SIGTERM: keep accepting this long (readiness is 503 at once), so a load balancer stops "
             "sending first; part of drain_timeout."),
    duration("lingering_time", 0, "30s",
             "After an answer given before the body was read (an upload refused at its head, a body over its "
             "limit), what the client still sends is read and discarded this long in all, so the answer "
             "reaches it instead of a reset (nginx's lingering close)."),
    duration("lingering_timeout", 1, "5s", "The same, per read."),
    integer("lingering_max_bytes", 0, 1ull << 40, "1073741824", "The same, at most this many bytes."),
    duration("stream_heartbeat", 0, "15s",
             "An SSE comment `: keep-alive` on a stream silent this long (keeps proxies from cutting it); "
             "0ms: off."),
    integer("stream_buffer_bytes", 1024, 1ull << 30, "262144",
            "A stream's bytes read ahead of a slow client; past it the stream ends with a "
            "stream_buffer_overflow event and the upstream call is cancelled."),
    integer("max_stream_event_bytes", 1024, 1ull << 30, "1048576",
            "The longest event (or line) an upstream stream may send; past it the stream ends with "
            "upstream_event_too_large."),
    boolean("deployment_header", "false", "`X-Tahua-Deployment` and `X-Tahua-Version` on answers."),
    boolean("tenant_metrics", "false", "Per-tenant series in /metrics (at most 1,000 tenants)."),
    section("readiness", "What /readyz requires."),
    section("uploads", "Multipart bodies: /v1/files, /v1/audio/transcriptions and translations, /v1/images/edits."),
    section("realtime", "WebSocket sessions (/v1/realtime)."),
};
const Table kServer("server", "The gateway's own limits and timeouts.", kServerFields);

constexpr Field kRealtimeFields[] = {
    duration("idle_timeout", 1, "10m", "A session is closed (1001) after this long without a frame either way."),
    duration("max_duration", 1, "60m", "A session is closed (1001) after this long in all."),
    integer("max_frame_bytes", 1024, 256u << 20, "16777216", "A larger message ends the session."),
};
const Table kRealtime("server.realtime", "WebSocket sessions (/v1/realtime).", kRealtimeFields);

constexpr Field kReadinessFields[] = {
    list("require_models", "[]",
         "Model names: /readyz is 503 unless each has a usable deployment. Empty: an upstream outage must not "
         "take every replica out of the Service at once."),
};
const Table kReadiness("server.readiness", "What /readyz requires.", kReadinessFields);

constexpr Field kUploadsFields[] = {
    string("spool_dir", "\"\"", "Where bodies are spooled as they arrive (unnamed files); empty: $TMPDIR, else /tmp."),
    duration("timeout", 1, "10m", "The whole upload body must arrive within this."),
    integer("max_text_bytes", 1024, 16 << 20, "65536", "The form's text fields together."),
    any("max_bytes", "104857600",
        "Bytes per upload path; over it: 413. A number sets every path; a map of path to bytes sets each "
        "(`default`, `/v1/files`, `/v1/audio/transcriptions`, `/v1/audio/translations`, `/v1/images/edits`); "
        "/v1/files defaults to 536870912 (512 MiB)."),
};
const Table kUploads("server.uploads", "Multipart bodies.", kUploadsFields);

constexpr Field kListenerFields[] = {
    nonEmpty("address", "127.0.0.1", "An IPv4 or IPv6 literal.").atRestart(),
    integer("port", 0, 65535, "8080", "0: an ephemeral port (the bound port is logged).").atRestart(),
    section("tls", "Serve HTTPS.").atRestart(),
};
const Table kListener("listeners[]", "A public listener.", kListenerFields);

constexpr Field kListenerTlsFields[] = {
    nonEmpty("cert_file", "", "The PEM certificate chain.").needed().atRestart(),
    nonEmpty("key_file", "", "The PEM private key.").needed().atRestart(),
};
const Table kListenerTls("listeners[].tls", "HTTPS on a listener.", kListenerTlsFields);

constexpr Field kLimitsFields[] = {
    integer("max_concurrent_requests", 0, 10'000'000, "0",
            "API requests in flight; over it: 429 concurrency_limit_exceeded (Retry-After: 1), nothing sent "
            "upstream. Exact for the process (shared by every worker); 0: none."),
    integer("max_concurrent_streams", 0, 10'000'000, "0", "The same for streams."),
    duration("queue_timeout", 0, "0s",
             "Over 0: a request over a cap waits in line this long for a slot (then 429); applies to routes' caps "
             "too."),
    integer("max_queue", 0, 10'000'000, "1000", "Waiters per cap; beyond it: 429 at once."),
};
const Table kLimits("limits", "Concurrency caps (bulkheads) for the whole gateway.", kLimitsFields);

constexpr Field kAdminFields[] = {
    section("listen", "The admin API's own address and port. Required.").needed().atRestart(),
    nonEmpty("token", "", "The bearer token (at least 16 characters); prefer token_env. Named `admin` in the audit log."),
    nonEmpty("token_env", "",
             "The environment variable holding the token (read at start; unset: the admin API is off). One of "
             "token, token_env and tokens is required."),
    list("tokens", "[]", "Named tokens with the admin token's rights (by SHA-256 or an environment variable)."),
    list("tenant_tokens", "[]", "Tokens (by SHA-256) that manage one tenant's keys only."),
    integer("audit_entries", 100, 10'000'000, "10000",
            "The audit log (GET /admin/v1/audit) keeps the newest this many entries, in the state store."),
};
const Table kAdmin("admin", "The admin API (docs/admin-api.md).", kAdminFields);

constexpr Field kAdminListenFields[] = {
    nonEmpty("address", "127.0.0.1", "An IPv4 or IPv6 literal.").atRestart(),
    integer("port", 0, 65535, "", "Not a public listener's.").needed().atRestart(),
};
const Table kAdminListen("admin.listen", "The admin API's listener.", kAdminListenFields);

}  // namespace

void Loader::loadServer(const YAML::Node& n, ServerConfig& s) {
  Fields f(*this, n, "server", kServer);
  f.read("workers", s.workers);
  f.read("max_connections", s.max_connections);
  f.read("max_header_bytes", s.max_header_bytes);
  f.read("max_body_bytes", s.max_body_bytes);
  f.read("max_response_bytes", s.max_response_bytes);
  f.read("header_timeout", s.header_timeout);
  f.read("body_timeout", s.body_timeout);
  f.read("keepalive_timeout", s.keepalive_timeout);
  f.read("client_write_timeout", s.client_write_timeout);
  f.read("drain_timeout", s.drain_timeout);
  f.read("lingering_time", s.lingering_time);
  f.read("lingering_timeout", s.lingering_timeout);
  f.read("lingering_max_bytes", s.lingering_max_bytes);
  f.read("drain_accept_grace", s.drain_accept_grace);
  f.read("stream_heartbeat", s.stream_heartbeat);
  f.read("stream_buffer_bytes", s.stream_buffer_bytes);
  f.read("max_stream_event_bytes", s.max_stream_event_bytes);
  f.read("max_url_bytes", s.max_url_bytes);
  f.read("max_json_depth", s.max_json_depth);
  f.read("deployment_header", s.deployment_header);
  f.read("tenant_metrics", s.tenant_metrics);
  if (auto u = f["uploads"]) loadUploads(u, f.at("uploads"), s.uploads);
  if (auto r = f["realtime"]) {
    Fields rt(*this, r, f.at("realtime"), kRealtime);
    rt.read("idle_timeout", s.realtime_idle_timeout);
    rt.read("max_duration", s.realtime_max_duration);
    rt.read("max_frame_bytes", s.realtime_max_frame_bytes);
  }
  if (auto r = f["readiness"]) {
    Fields rd(*this, r, f.at("readiness"), kReadiness);
    if (auto m = rd["require_models"]) {
      if (!m.IsSequence()) fail(m, rd.at("require_models"), "expected a list of model names");
      for (std::size_t i = 0; i < m.size(); ++i)
        s.ready_models.push_back(nonEmpty(m[i], rd.at("require_models") + "[" + std::to_string(i) + "]"));
    }
  }
}

void Loader::loadUploads(const YAML::Node& n, const std::string& p, UploadConfig& u) {
  Fields f(*this, n, p, kUploads);
  if (auto v = f["spool_dir"]) {
    u.spool_dir = nonEmpty(v, p + ".spool_dir");
    std::error_code ec;
    if (!std::filesystem::is_directory(u.spool_dir, ec)) fail(v, p + ".spool_dir", "not a directory: \"" + u.spool_dir + "\"");
  }
  f.read("timeout", u.timeout);
  f.read("max_text_bytes", u.max_text_bytes);
  if (auto m = f["max_bytes"]) {
    // A number for every upload path, or a map of path -> bytes.
    if (m.IsScalar()) {
      u.default_max_bytes = integer(m, p + ".max_bytes", 1024, 1ull << 40);
      u.max_bytes.clear();
    } else {
      if (!m.IsMap()) fail(m, p + ".max_bytes", "expected a number of bytes or a map of upload path to bytes");
      for (const auto& kv : m) {
        const std::string path = kv.first.as<std::string>();
        static constexpr std::string_view kPaths[] = {"/v1/files", "/v1/audio/transcriptions", "/v1/audio/translations",
                                                      "/v1/images/edits", "default"};
        if (std::find(std::begin(kPaths), std::end(kPaths), path) == std::end(kPaths))
          fail(kv.first, p + ".max_bytes", "\"" + path + "\" is not an upload path (/v1/files, /v1/audio/transcriptions, "
                                          "/v1/audio/translations, /v1/images/edits) or default");
        const std::uint64_t bytes = integer(kv.second, p + ".max_bytes." + path, 1024, 1ull << 40);
        if (path == "default") {
          u.default_max_bytes = bytes;
          continue;
        }
        std::erase_if(u.max_bytes, [&](const auto& e) { return e.first == path; });
        u.max_bytes.emplace_back(path, bytes);
      }
    }
  }
}

void Loader::loadListeners(const YAML::Node& n, const YAML::Node& root, Config& cfg) {
  if (!n && listeners_optional) return;  // --listen gives them
  if (!n) fail(root, "listeners", "required: at least one listener (or --listen)");
  if (!n.IsSequence() || n.size() == 0) fail(n, "listeners", "expected a non-empty list");
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::string p = "listeners[" + std::to_string(i) + "]";
    const YAML::Node& l = n[i];
    Fields f(*this, l, p, kListener);
    ListenerConfig lc;
    f.read("address", lc.address);
    if (lc.address.find_first_not_of("0123456789abcdefABCDEF.:") != std::string::npos)
      fail(l["address"] ? l["address"] : l, p + ".address", "must be an IPv4 or IPv6 literal");
    f.read("port", lc.port);
    if (auto t = f["tls"]) {
      Fields tf(*this, t, f.at("tls"), kListenerTls);
      ServerTlsConfig tls;
      tf.read("cert_file", tls.cert_file);
      tf.read("key_file", tls.key_file);
      for (auto* f : {&tls.cert_file, &tls.key_file})
        if (!std::ifstream(*f)) fail(t, p + ".tls", "cannot read file \"" + *f + "\"");
      lc.tls = std::move(tls);
    }
    cfg.listeners.push_back(std::move(lc));
  }
}

void Loader::loadLimits(const YAML::Node& n, LimitsConfig& l) {
  Fields f(*this, n, "limits", kLimits);
  f.read("queue_timeout", l.queue_timeout);
  f.read("max_queue", l.max_queue);
  f.read("max_concurrent_requests", l.max_concurrent_requests);
  f.read("max_concurrent_streams", l.max_concurrent_streams);
}

void Loader::loadAdmin(const YAML::Node& n, Config& cfg) {
  const std::string p = "admin";
  Fields f(*this, n, p, kAdmin);
  AdminConfig& a = cfg.admin;
  if (!n["listen"]) fail(n, p + ".listen", "required: the admin API's own address and port");
  const YAML::Node& l = n["listen"];
  Fields lf(*this, l, p + ".listen", kAdminListen);
  lf.read("address", a.listener.address);
  if (a.listener.address.find_first_not_of("0123456789abcdefABCDEF.:") != std::string::npos)
    fail(l["address"] ? l["address"] : l, p + ".listen.address", "must be an IPv4 or IPv6 literal");
  lf.read("port", a.listener.port);
  for (const auto& pub : cfg.listeners)
    if (pub.port != 0 && pub.port == a.listener.port && pub.address == a.listener.address)
      fail(l["port"], p + ".listen.port", "must not be a public listener's address");
  if (n["token"] && n["token_env"]) fail(n["token"], p + ".token", "set token or token_env, not both");
  f.read("token", a.token);
  if (f.read("token_env", a.token_env)) {
    if (const char* env = std::getenv(a.token_env.c_str()); env && *env) a.token = env;
    else warnings_.push_back("admin: environment variable " + a.token_env + " is not set; the admin API is off");
  }
  if (!n["token"] && !n["token_env"] && !n["tokens"]) fail(n, p + ".token_env", "required: the admin API needs a token");
  if (!a.token.empty() && a.token.size() < 16) fail(n["token"] ? n["token"] : n["token_env"], p + ".token", "must be at least 16 characters");
  if (n["tokens"]) loadAdminTokens(n["tokens"], cfg);
  f.read("audit_entries", a.audit_entries);
  a.enabled = !a.token.empty() || !a.tokens.empty();
}

}  // namespace tahua::config_detail
