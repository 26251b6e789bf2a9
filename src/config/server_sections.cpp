// The gateway's own sections: server, listeners, limits and admin.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "config/loader_detail.h"

namespace tahua::config_detail {

void Loader::loadServer(const YAML::Node& n, ServerConfig& s) {
  const std::string p = "server";
  checkKeys(n, p, {"workers", "max_connections", "max_header_bytes", "max_body_bytes", "max_response_bytes", "header_timeout",
                   "body_timeout", "keepalive_timeout", "client_write_timeout", "drain_timeout", "lingering_time",
                   "lingering_timeout", "lingering_max_bytes",
                   "stream_heartbeat", "drain_accept_grace", "deployment_header", "stream_buffer_bytes",
                   "max_stream_event_bytes", "max_url_bytes", "max_json_depth", "tenant_metrics", "readiness", "uploads", "realtime"});
  if (auto v = n["workers"]) s.workers = static_cast<unsigned>(integer(v, p + ".workers", 0, 256));
  if (auto v = n["max_connections"]) s.max_connections = integer(v, p + ".max_connections", 1, 10'000'000);
  if (auto v = n["max_header_bytes"]) s.max_header_bytes = integer(v, p + ".max_header_bytes", 1024, 1 << 20);
  if (auto v = n["max_body_bytes"]) s.max_body_bytes = integer(v, p + ".max_body_bytes", 1, 1ull << 30);
  if (auto v = n["max_response_bytes"])
    s.max_response_bytes = integer(v, p + ".max_response_bytes", 1024, 1ull << 32);
  if (auto v = n["header_timeout"]) s.header_timeout = duration(v, p + ".header_timeout", Millis(1));
  if (auto v = n["body_timeout"]) s.body_timeout = duration(v, p + ".body_timeout", Millis(1));
  if (auto v = n["keepalive_timeout"]) s.keepalive_timeout = duration(v, p + ".keepalive_timeout", Millis(1));
  if (auto v = n["client_write_timeout"])
    s.client_write_timeout = duration(v, p + ".client_write_timeout", Millis(1));
  if (auto v = n["drain_timeout"]) s.drain_timeout = duration(v, p + ".drain_timeout");
  if (auto v = n["lingering_time"]) s.lingering_time = duration(v, p + ".lingering_time");
  if (auto v = n["lingering_timeout"]) s.lingering_timeout = duration(v, p + ".lingering_timeout", Millis(1));
  if (auto v = n["lingering_max_bytes"]) s.lingering_max_bytes = integer(v, p + ".lingering_max_bytes", 0, 1ull << 40);
  if (auto v = n["drain_accept_grace"]) s.drain_accept_grace = duration(v, p + ".drain_accept_grace");
  if (auto v = n["stream_heartbeat"]) s.stream_heartbeat = duration(v, p + ".stream_heartbeat");
  if (auto v = n["stream_buffer_bytes"])
    s.stream_buffer_bytes = integer(v, p + ".stream_buffer_bytes", 1024, 1ull << 30);
  if (auto v = n["max_stream_event_bytes"])
    s.max_stream_event_bytes = integer(v, p + ".max_stream_event_bytes", 1024, 1ull << 30);
  if (auto v = n["max_url_bytes"]) s.max_url_bytes = integer(v, p + ".max_url_bytes", 256, 1 << 20);
  if (auto v = n["max_json_depth"]) s.max_json_depth = integer(v, p + ".max_json_depth", 8, 10'000);
  if (auto v = n["deployment_header"]) s.deployment_header = boolean(v, p + ".deployment_header");
  if (auto v = n["tenant_metrics"]) s.tenant_metrics = boolean(v, p + ".tenant_metrics");
  if (auto u = n["uploads"]) loadUploads(u, p + ".uploads", s.uploads);
  if (auto r = n["realtime"]) {
    checkKeys(r, p + ".realtime", {"idle_timeout", "max_duration", "max_frame_bytes"});
    if (auto v = r["idle_timeout"]) s.realtime_idle_timeout = duration(v, p + ".realtime.idle_timeout", Millis(1));
    if (auto v = r["max_duration"]) s.realtime_max_duration = duration(v, p + ".realtime.max_duration", Millis(1));
    if (auto v = r["max_frame_bytes"]) s.realtime_max_frame_bytes = integer(v, p + ".realtime.max_frame_bytes", 1024, 256u << 20);
  }
  if (auto r = n["readiness"]) {
    checkKeys(r, p + ".readiness", {"require_models"});
    if (auto m = r["require_models"]) {
      if (!m.IsSequence()) fail(m, p + ".readiness.require_models", "expected a list of model names");
      for (std::size_t i = 0; i < m.size(); ++i)
        s.ready_models.push_back(nonEmpty(m[i], p + ".readiness.require_models[" + std::to_string(i) + "]"));
    }
  }
}

void Loader::loadUploads(const YAML::Node& n, const std::string& p, UploadConfig& u) {
  checkKeys(n, p, {"spool_dir", "timeout", "max_text_bytes", "max_bytes"});
  if (auto v = n["spool_dir"]) {
    u.spool_dir = nonEmpty(v, p + ".spool_dir");
    std::error_code ec;
    if (!std::filesystem::is_directory(u.spool_dir, ec)) fail(v, p + ".spool_dir", "not a directory: \"" + u.spool_dir + "\"");
  }
  if (auto v = n["timeout"]) u.timeout = duration(v, p + ".timeout", Millis(1));
  if (auto v = n["max_text_bytes"]) u.max_text_bytes = integer(v, p + ".max_text_bytes", 1024, 16 << 20);
  if (auto m = n["max_bytes"]) {
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
    checkKeys(l, p, {"address", "port", "tls"});
    ListenerConfig lc;
    if (auto v = l["address"]) lc.address = nonEmpty(v, p + ".address");
    if (lc.address.find_first_not_of("0123456789abcdefABCDEF.:") != std::string::npos)
      fail(l["address"] ? l["address"] : l, p + ".address", "must be an IPv4 or IPv6 literal");
    if (auto v = l["port"]) lc.port = static_cast<std::uint16_t>(integer(v, p + ".port", 0, 65535));
    if (auto t = l["tls"]) {
      checkKeys(t, p + ".tls", {"cert_file", "key_file"});
      ServerTlsConfig tls;
      if (!t["cert_file"]) fail(t, p + ".tls.cert_file", "required");
      if (!t["key_file"]) fail(t, p + ".tls.key_file", "required");
      tls.cert_file = nonEmpty(t["cert_file"], p + ".tls.cert_file");
      tls.key_file = nonEmpty(t["key_file"], p + ".tls.key_file");
      for (auto* f : {&tls.cert_file, &tls.key_file})
        if (!std::ifstream(*f)) fail(t, p + ".tls", "cannot read file \"" + *f + "\"");
      lc.tls = std::move(tls);
    }
    cfg.listeners.push_back(std::move(lc));
  }
}

void Loader::loadLimits(const YAML::Node& n, LimitsConfig& l) {
  checkKeys(n, "limits", {"max_concurrent_requests", "max_concurrent_streams", "queue_timeout", "max_queue"});
  if (auto v = n["queue_timeout"]) l.queue_timeout = duration(v, "limits.queue_timeout");
  if (auto v = n["max_queue"]) l.max_queue = integer(v, "limits.max_queue", 0, 10'000'000);
  if (auto v = n["max_concurrent_requests"])
    l.max_concurrent_requests = integer(v, "limits.max_concurrent_requests", 0, 10'000'000);
  if (auto v = n["max_concurrent_streams"])
    l.max_concurrent_streams = integer(v, "limits.max_concurrent_streams", 0, 10'000'000);
}

void Loader::loadAdmin(const YAML::Node& n, Config& cfg) {
  const std::string p = "admin";
  checkKeys(n, p, {"listen", "token", "token_env", "tenant_tokens"});
  AdminConfig& a = cfg.admin;
  if (!n["listen"]) fail(n, p + ".listen", "required: the admin API's own address and port");
  const YAML::Node& l = n["listen"];
  checkKeys(l, p + ".listen", {"address", "port"});
  if (auto v = l["address"]) a.listener.address = nonEmpty(v, p + ".listen.address");
  if (a.listener.address.find_first_not_of("0123456789abcdefABCDEF.:") != std::string::npos)
    fail(l["address"] ? l["address"] : l, p + ".listen.address", "must be an IPv4 or IPv6 literal");
  if (!l["port"]) fail(l, p + ".listen.port", "required");
  a.listener.port = static_cast<std::uint16_t>(integer(l["port"], p + ".listen.port", 0, 65535));
  for (const auto& pub : cfg.listeners)
    if (pub.port != 0 && pub.port == a.listener.port && pub.address == a.listener.address)
      fail(l["port"], p + ".listen.port", "must not be a public listener's address");
  if (n["token"] && n["token_env"]) fail(n["token"], p + ".token", "set token or token_env, not both");
  if (auto v = n["token"]) a.token = nonEmpty(v, p + ".token");
  if (auto v = n["token_env"]) {
    a.token_env = nonEmpty(v, p + ".token_env");
    if (const char* env = std::getenv(a.token_env.c_str()); env && *env) a.token = env;
    else warnings_.push_back("admin: environment variable " + a.token_env + " is not set; the admin API is off");
  }
  if (!n["token"] && !n["token_env"]) fail(n, p + ".token_env", "required: the admin API needs a token");
  if (!a.token.empty() && a.token.size() < 16) fail(n["token"] ? n["token"] : n["token_env"], p + ".token", "must be at least 16 characters");
  a.enabled = !a.token.empty();
}

}  // namespace tahua::config_detail
