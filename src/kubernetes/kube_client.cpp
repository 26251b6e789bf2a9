#include "kubernetes/kube_client.h"

#include <boost/asio/io_context.hpp>
#include <fstream>
#include <optional>
#include <sstream>

#include "http/http_url.h"
#include "net/http_client.h"
#include "net/http_client_await.h"

namespace tahua {

namespace asio = boost::asio;

namespace {

constexpr std::size_t kMaxBody = 16u << 20;  // a list of thousands of resources; one watch event
constexpr std::size_t kMaxErrorBody = 64u << 10;

std::optional<std::string> readToken(const std::string& path) {
  if (path.empty()) return std::string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream buf;
  buf << in.rdbuf();
  std::string t = buf.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  return t;
}

HttpClientOptions clientOptions(const KubernetesConfig& config) {
  HttpClientOptions o;
  o.ca_file = config.ca_file;  // "": the system's CAs
  return o;
}

}  // namespace

struct KubeClient::Impl {
  Impl(asio::io_context& i, const KubernetesConfig& config) : io(i), http(i, clientOptions(config)) {}
  asio::io_context& io;
  HttpClient http;
  std::optional<HttpUrl> server;
  std::string setup_error;  // the URL or the CA file would not do: every call fails with it

  // A call, or with `on_line` a watch: each line of a 200 answer's body handed over as
  // it arrives, the head within cfg.timeout, then as long as something comes every `idle`.
  asio::awaitable<KubeResponse> run(bool cancelled, const KubernetesConfig& cfg, std::string_view method, std::string target,
                                    std::string body, std::string_view content_type, Millis idle,
                                    const std::function<bool(std::string_view)>* on_line) {
    KubeResponse out;
    if (cancelled) {
      out.error = "cancelled";
      co_return out;
    }
    if (!setup_error.empty()) {
      out.error = setup_error;
      co_return out;
    }
    const auto token = readToken(cfg.token_file);
    if (!token) {
      out.error = "cannot read kubernetes.token_file " + cfg.token_file;
      co_return out;
    }
    OutboundRequest req;
    req.method = std::string(method);
    req.url = *server;
    req.url.target = std::move(target);
    req.headers.emplace_back("accept", "application/json");
    if (!token->empty()) req.headers.emplace_back("authorization", "Bearer " + *token);
    if (!content_type.empty()) req.headers.emplace_back("content-type", std::string(content_type));
    req.body = std::move(body);
    std::string pending;  // a line's start
    std::string line_error;
    bool stopped = false;
    if (!on_line) {
      req.timeout = cfg.timeout;
      req.max_response_bytes = kMaxBody;
    } else {
      req.timeout = Millis(0);
      req.head_timeout = cfg.timeout;
      req.idle_timeout = idle;
      req.max_response_bytes = kMaxErrorBody;  // the body of an answer other than 200
      req.on_body = [&](std::string_view piece) {
        pending.append(piece);
        std::size_t start = 0;
        for (std::size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
          std::string_view line(pending.data() + start, nl - start);
          if (!line.empty() && !(*on_line)(line)) {
            stopped = true;
            return false;
          }
        }
        pending.erase(0, start);
        if (pending.size() > kMaxBody) {
          line_error = "a watch event over 16 MiB";
          return false;
        }
        return true;
      };
    }
    OutboundResponse res = co_await fetchAwaitable(http, std::move(req));
    out.status = res.status;
    out.error = std::move(res.error);
    out.body = std::move(res.body);
    if (!line_error.empty()) out.error = std::move(line_error);
    else if (on_line && out.status == 200 && out.error.empty() && !stopped && !pending.empty()) (*on_line)(pending);
    co_return out;
  }
};

KubeClient::KubeClient(asio::io_context& io, KubernetesConfig config)
    : config_(std::move(config)), impl_(std::make_unique<Impl>(io, config_)) {
  std::string error;
  impl_->server = parseHttpUrl(config_.api_server, &error, true);
  if (!impl_->server) impl_->setup_error = "kubernetes.api_server: " + error;
  else if (const std::string& tls = impl_->http.setupError(); !tls.empty())
    impl_->setup_error = config_.ca_file.empty() ? "kubernetes: " + tls : "kubernetes." + tls;  // "kubernetes.ca_file <path>: ..."
}

KubeClient::~KubeClient() = default;

asio::awaitable<KubeResponse> KubeClient::call(std::string_view method, std::string target, std::string body,
                                               std::string_view content_type) {
  co_return co_await impl_->run(cancelled_, config_, method, std::move(target), std::move(body), content_type, Millis(0), nullptr);
}

asio::awaitable<KubeResponse> KubeClient::stream(std::string target, Millis idle,
                                                 std::function<bool(std::string_view line)> on_line) {
  co_return co_await impl_->run(cancelled_, config_, "GET", std::move(target), {}, {}, idle, &on_line);
}

asio::io_context& KubeClient::io() { return impl_->io; }

void KubeClient::cancel() {
  cancelled_ = true;
  impl_->http.closeAll();  // the calls in flight end with "cancelled"; kept connections close
}

}  // namespace tahua
