#include "providers/snapshot.h"

#include <simdjson.h>

#include <boost/asio/ssl/context.hpp>
#include <array>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "config/provider_kind.h"
#include "core/json_scan.h"
#include "core/log.h"
#include "providers/vendors.h"

namespace tahua {
namespace {

std::string envFirst(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (const char* v = std::getenv(n); v && *v) return v;
  return {};
}

bool noProxyMatches(std::string_view host, std::string_view list) {
  while (!list.empty()) {
    auto comma = list.find(',');
    std::string_view entry = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    if (entry.empty()) continue;
    if (entry == "*") return true;
    if (entry.front() == '.') entry.remove_prefix(1);
    if (host == entry) return true;
    if (host.size() > entry.size() && host.substr(host.size() - entry.size()) == entry &&
        host[host.size() - entry.size() - 1] == '.')
      return true;
  }
  return false;
}

std::shared_ptr<boost::asio::ssl::context> makeClientTls(const ProviderConfig& p, std::string& error) {
  namespace ssl = boost::asio::ssl;
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  boost::system::error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                   ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  if (!p.ca_file.empty()) {
    ctx->load_verify_file(p.ca_file, ec);
    if (ec) {
      error = "provider \"" + p.name + "\": cannot load tls.ca_file \"" + p.ca_file + "\": " + ec.message();
      return nullptr;
    }
  } else {
    ctx->set_default_verify_paths(ec);
    if (ec) {
      error = "provider \"" + p.name + "\": cannot load the system CA store: " + ec.message();
      return nullptr;
    }
  }
  ctx->set_verify_mode(p.tls_verify ? ssl::verify_peer : ssl::verify_none);
  return ctx;
}

}  // namespace

std::string hostHeader(const ProviderConfig& p) {
  std::string host = p.host.find(':') != std::string::npos ? "[" + p.host + "]" : p.host;
  if (p.port != (p.https ? 443 : 80)) host += ":" + std::to_string(p.port);
  return host;
}

ProxySettings proxyFor(const ProviderConfig& provider) {
  if (provider.kind && !provider.kind->remote) return {};
  std::string url = provider.https ? envFirst({"HTTPS_PROXY", "https_proxy"}) : envFirst({"HTTP_PROXY", "http_proxy"});
  if (url.empty()) return {};
  if (noProxyMatches(provider.host, envFirst({"NO_PROXY", "no_proxy"}))) return {};
  auto s = parseProxyUrl(std::move(url));
  if (!s) {
    log::warn("ignoring proxy setting: only http:// proxies are supported", {{"provider", provider.name}});
    return {};
  }
  return *s;
}

std::optional<std::string> ProviderAdapter::prepare(const ProviderConfig&) { return std::nullopt; }

namespace {

// The adapter of a vendor's kind (vendors.h); null for a kind it does not list.
std::unique_ptr<ProviderAdapter> makeAdapter(const ProviderKind* kind) {
#define TAHUA_MAKE_ADAPTER(vendor_kind, factory) \
  if (kind == &vendor_kind) return factory();
  TAHUA_VENDORS(TAHUA_MAKE_ADAPTER)
#undef TAHUA_MAKE_ADAPTER
  return nullptr;
}

}  // namespace

std::variant<SnapshotPtr, std::string> buildSnapshot(ConfigPtr config) {
  auto snap = std::make_shared<Snapshot>();
  snap->config = config;
  for (const auto& p : config->providers) {
    ProviderRuntime rt;
    rt.config = &p;
    rt.adapter = makeAdapter(p.kind);
    if (!rt.adapter) return "provider \"" + p.name + "\": no adapter for type \"" + p.type + "\"";
    if (auto error = rt.adapter->prepare(p)) return "provider \"" + p.name + "\": " + *error;
    if (p.kind->remote) {
      if (p.https) {
        std::string error;
        rt.tls = makeClientTls(p, error);
        if (!rt.tls) return error;
      }
      rt.proxy = proxyFor(p);
      rt.origin_key = std::string(p.https ? "https://" : "http://") + p.host + ":" + std::to_string(p.port);
      if (rt.proxy.enabled) rt.origin_key += " via " + rt.proxy.host + ":" + std::to_string(rt.proxy.port);
      // Connections to the same origin with different TLS settings must not be shared.
      rt.origin_key += "#" + p.name;
    }
    snap->providers.push_back(std::move(rt));
  }
  return SnapshotPtr(std::move(snap));
}

namespace {

// Reads {"usage":{...}} from a padded document.
bool readUsage(simdjson::padded_string_view json, Usage& usage) {
  using namespace simdjson;
  thread_local ondemand::parser parser;
  ondemand::document doc;
  if (parser.iterate(json).get(doc)) return false;
  ondemand::object obj;
  if (doc.get_object().get(obj)) return false;
  ondemand::object u;
  if (obj["usage"].get_object().get(u)) return false;
  bool found = false;
  for (auto field : u) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return found;
    std::int64_t v = 0;
    std::int64_t* slot = nullptr;
    if (key == "prompt_tokens_details" || key == "input_tokens_details") {
      ondemand::object details;
      std::int64_t cached = 0;
      if (field.value().get_object().get(details) == SUCCESS && details["cached_tokens"].get_int64().get(cached) == SUCCESS &&
          cached >= 0)
        usage.cached_tokens = cached;
      continue;
    }
    if (key == "prompt_tokens" || key == "input_tokens") slot = &usage.prompt_tokens;
    else if (key == "completion_tokens" || key == "output_tokens") slot = &usage.completion_tokens;
    else if (key == "total_tokens") slot = &usage.total_tokens;
    if (slot && field.value().get_int64().get(v) == SUCCESS && v >= 0) {
      *slot = v;
      found = true;
    }
  }
  if (found && usage.total_tokens < 0 && usage.prompt_tokens >= 0)
    usage.total_tokens = usage.prompt_tokens + std::max<std::int64_t>(usage.completion_tokens, 0);
  return found;
}

// A whole answer's usage, read without parsing the answer: from its last "usage" key,
// one scan to the end. The value must be an object whose braces close at depth 1, and the
// document's own brace must come only at its end (a "usage" nested deeper meets one
// closing brace too many before the end): then it is the top-level usage, and its
// integer fields are read on the way (a simdjson parse of the whole answer was ~7k
// instructions, of the usage object alone ~3k). Anything unexpected — a value that is
// not an integer where a count is, a key with an escape, a body cut short — answers
// Unsure, and the caller parses the whole document as before.
enum class TailUsage { None, Read, Unsure };  // no "usage" or "usage":null / read / parse it all

constexpr auto kStructural = [] {
  std::array<bool, 256> t{};
  for (unsigned char c : std::string_view("\"{}[]")) t[c] = true;
  return t;
}();

bool jsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

TailUsage readTailUsage(std::string_view json, Usage& usage) {
  const auto at = findLastKey(json, "\"usage\"");
  if (at == std::string_view::npos) return TailUsage::None;
  const char* p = json.data() + at + 7;
  const char* const last = json.data() + json.size();
  while (p < last && jsonSpace(*p)) ++p;
  if (p == last || *p != ':') return TailUsage::Unsure;  // a string value "usage", not a key
  ++p;
  while (p < last && jsonSpace(*p)) ++p;
  if (std::string_view(p, static_cast<std::size_t>(last - p)).starts_with("null")) return TailUsage::None;
  if (p == last || *p != '{') return TailUsage::Unsure;
  Usage read = usage;
  bool found = false, closed = false;
  std::string_view outer;  // the depth-2 key whose object is open (…_tokens_details)
  int depth = 1;           // inside the document's object
  for (; p < last; ++p) {
    while (p < last && !kStructural[static_cast<unsigned char>(*p)]) ++p;  // numbers, commas, space
    if (p == last) break;
    if (*p == '"') {  // to the closing quote: one not escaped by an odd run of backslashes
      const char* open = p;
      bool escaped = false;
      for (;;) {
        p = static_cast<const char*>(std::memchr(p + 1, '"', static_cast<std::size_t>(last - p - 1)));
        if (!p) return TailUsage::Unsure;
        const char* b = p;
        while (b[-1] == '\\') --b;
        if (b != p) escaped = true;
        if ((p - b) % 2 == 0) break;
      }
      if (closed || depth < 2 || depth > 3) continue;  // not inside the usage object
      // A key inside usage (a string followed by ':'): its value, when it is a count.
      const char* v = p + 1;
      while (v < last && jsonSpace(*v)) ++v;
      if (v == last || *v != ':') continue;  // a string value
      if (escaped) return TailUsage::Unsure;
      const std::string_view key(open + 1, static_cast<std::size_t>(p - open - 1));
      for (++v; v < last && jsonSpace(*v);) ++v;
      if (depth == 2 && v < last && *v == '{') outer = key;
      std::int64_t* slot = nullptr;
      if (depth == 2) {
        if (key == "prompt_tokens" || key == "input_tokens") slot = &read.prompt_tokens;
        else if (key == "completion_tokens" || key == "output_tokens") slot = &read.completion_tokens;
        else if (key == "total_tokens") slot = &read.total_tokens;
      } else if (key == "cached_tokens" && (outer == "prompt_tokens_details" || outer == "input_tokens_details")) {
        slot = &read.cached_tokens;
      }
      if (!slot) continue;
      std::int64_t n = 0;
      const auto [end, ec] = std::from_chars(v, last, n);
      // Only an integer counts (as a parser's get_int64 would have it): not 1.5, not 1e3.
      if (ec != std::errc() || end == last || !(jsonSpace(*end) || *end == ',' || *end == '}')) return TailUsage::Unsure;
      if (n < 0) continue;
      *slot = n;
      if (depth == 2) found = true;
    } else if (*p == '{' || *p == '[') {
      ++depth;
    } else if (--depth == 1) {
      closed = true;  // the usage object (or a later field's value) ended
    } else if (depth == 0) {
      break;
    }
  }
  if (depth != 0 || !closed) return TailUsage::Unsure;
  for (++p; p < last; ++p)
    if (!jsonSpace(*p)) return TailUsage::Unsure;
  if (found && read.total_tokens < 0 && read.prompt_tokens >= 0)
    read.total_tokens = read.prompt_tokens + std::max<std::int64_t>(read.completion_tokens, 0);
  if (!found) return TailUsage::Unsure;  // as before: the whole parse decides (it finds none either)
  usage = read;
  return TailUsage::Read;
}

// Cheap pre-check: no "usage" key, or "usage":null (most chunks of a usage-enabled
// stream), means there is nothing to parse. The last "usage" is the one looked at: it
// closes OpenAI-format objects (chunks, completions, embeddings, a response object), so
// it is found near the end, and a "usage" inside something before it (a tool's schema
// echoed in a Responses object) cannot hide it.
bool mayHaveUsage(std::string_view json) {
  auto at = findLastKey(json, "\"usage\"");
  if (at == std::string_view::npos) return false;
  std::string_view rest = json.substr(at + 7);
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == ':')) rest.remove_prefix(1);
  return rest.substr(0, 4) != "null";
}

}  // namespace

std::int64_t topLevelArraySize(std::string& json, std::string_view key) {
  using namespace simdjson;
  if (json.capacity() < json.size() + SIMDJSON_PADDING) json.reserve(json.size() + SIMDJSON_PADDING);
  thread_local ondemand::parser parser;
  ondemand::document doc;
  if (parser.iterate(padded_string_view(json.data(), json.size(), json.capacity())).get(doc)) return -1;
  ondemand::object obj;
  ondemand::array arr;
  if (doc.get_object().get(obj) || obj[key].get_array().get(arr)) return -1;
  std::size_t n = 0;
  if (arr.count_elements().get(n)) return -1;
  return static_cast<std::int64_t>(n);
}

bool extractOpenAIUsage(std::string_view json, Usage& usage) {
  if (!mayHaveUsage(json)) return false;
  simdjson::padded_string padded(json);  // small (a stream event): the copy is cheap
  return readUsage(padded, usage);
}

bool extractOpenAIUsage(std::string& json, Usage& usage) {
  switch (readTailUsage(json, usage)) {
    case TailUsage::None: return false;
    case TailUsage::Read: return true;
    case TailUsage::Unsure: break;
  }
  // Whole response bodies can be large: pad in place instead of copying.
  if (json.capacity() < json.size() + simdjson::SIMDJSON_PADDING) json.reserve(json.size() + simdjson::SIMDJSON_PADDING);
  return readUsage(simdjson::padded_string_view(json.data(), json.size(), json.capacity()), usage);
}

}  // namespace tahua
