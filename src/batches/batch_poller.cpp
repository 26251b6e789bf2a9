#include "batches/batch_poller.h"

#include <unistd.h>

#include <random>

#include <boost/json/parse.hpp>

#include "core/json_read.h"
#include "core/log.h"
#include "filters/worker_services.h"
#include "http/outbound_call.h"
#include "providers/cloud_token.h"
#include "store/state_store.h"
#include "translate/json_util.h"

namespace tahua {
namespace bj = boost::json;

namespace {

constexpr std::string_view kNamespace = "batches";
constexpr std::string_view kLock = "tahua:lock:batch-poller";
constexpr std::size_t kMaxOutputBytes = 256u << 20;  // an output file read whole (bounded)

std::int64_t unixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool terminal(std::string_view status) {
  return status == "completed" || status == "failed" || status == "expired" || status == "cancelled";
}

// A call to the provider's API, authorized as the gateway's requests to it are: the
// bearer token of its cloud credential when it has one, else its key.
OutboundRequest providerCall(const ProviderConfig& p, std::string path, const std::string& bearer) {
  OutboundRequest r;
  r.url.host = p.host;
  r.url.port = std::to_string(p.port);
  r.url.tls = p.https;
  r.url.target = p.base_path + path;
  if (p.type == "azure-openai") r.url.target.append("?api-version=").append(p.api_version);
  if (!bearer.empty()) {
    r.headers.emplace_back("authorization", "Bearer " + bearer);
  } else if (!p.api_key.empty()) {
    if (p.type == "azure-openai") r.headers.emplace_back("api-key", p.api_key);
    else r.headers.emplace_back("authorization", "Bearer " + p.api_key);
  }
  for (const auto& [name, value] : p.headers) r.headers.emplace_back(name, value);
  r.timeout = p.timeouts.total;
  return r;
}

}  // namespace

BatchPoller::BatchPoller(StateStore& store, WorkerServices& services, BatchPollerHost& host)
    : store_(store), services_(services), host_(host) {
  owner_ = "batch-poller-" + std::to_string(std::random_device{}()) + "-" + std::to_string(::getpid());
}

BatchPoller::~BatchPoller() = default;

void BatchPoller::start() {
  stopped_ = false;
  schedule();
}

void BatchPoller::stop() {
  stopped_ = true;
  timer_.reset();
}

void BatchPoller::schedule() {
  if (stopped_) return;
  const SnapshotPtr snapshot = host_.currentSnapshot();
  timer_ = services_.runAfter(snapshot->config->files.poll_interval, [this] { tick(); });
}

void BatchPoller::tick() {
  if (stopped_ || running_) return;
  snapshot_ = host_.currentSnapshot();
  config_ = snapshot_->config;
  const std::vector<StateStore::Record> records = store_.records(kNamespace);
  if (records.empty() || config_->files.targets.empty()) {
    schedule();
    return;
  }
  // One replica at a time: the lock outlives a turn by a margin, and is renewed by
  // taking it again next turn.
  running_ = true;
  store_.tryLock(kLock, owner_, config_->files.poll_interval * 3, [this, records](bool held) {
    if (!held) {
      running_ = false;
      schedule();
      return;
    }
    queue_.clear();
    for (const auto& r : records) queue_.emplace_back(r.id, r.json);
    pollNext();
  });
}

void BatchPoller::pollNext() {
  if (stopped_) return;
  if (queue_.empty()) {
    running_ = false;
    schedule();
    return;
  }
  auto [id, record] = std::move(queue_.back());
  queue_.pop_back();
  boost::system::error_code ec;
  const bj::value v = readJson(record, ec);
  const bj::object* o = !ec && v.is_object() ? &v.get_object() : nullptr;
  const std::string provider_name = o ? std::string(json::strOr(*o, "provider", "")) : std::string();
  const std::int64_t created = o ? json::integer(*o, "created_at").value_or(0) : 0;
  const ProviderConfig* provider = nullptr;
  std::size_t provider_index = 0;
  for (std::size_t i = 0; i < config_->providers.size(); ++i)
    if (config_->providers[i].name == provider_name) {
      provider = &config_->providers[i];
      provider_index = i;
    }
  if (!provider || unixNowMs() - created > config_->files.ttl.count()) {
    log::warn("batch registration dropped without metering", {{"batch", id}, {"provider", provider_name},
                                                               {"why", provider ? "older than files.ttl" : "its provider is not configured"}});
    store_.eraseRecord(kNamespace, id, [](std::optional<std::string>) {});
    services_.post([this] { pollNext(); });
    return;
  }
  const std::optional<std::string> bearer = credentials(provider_index);
  if (!bearer) {  // asked about next turn
    services_.post([this] { pollNext(); });
    return;
  }
  services_.fetch(providerCall(*provider, "/batches/" + id, *bearer), [this, id, record, provider_index](OutboundResponse r) {
    if (stopped_) return;
    boost::system::error_code ec;
    const bj::value b = r.status == 200 ? readJson(r.body, ec) : bj::value();
    if (r.status != 200 || ec || !b.is_object()) {
      if (r.status == 404) {
        log::warn("batch gone at the provider; registration dropped", {{"batch", id}});
        store_.eraseRecord(kNamespace, id, [](std::optional<std::string>) {});
      } else {
        log::warn("batch poll failed; asking again next turn", {{"batch", id}, {"status", r.status}, {"error", r.error}});
      }
      pollNext();
      return;
    }
    const std::string_view status = json::strOr(b.get_object(), "status", "");
    if (!terminal(status)) {
      pollNext();
      return;
    }
    ended(id, record, provider_index, json::strOr(b.get_object(), "output_file_id", ""));
  });
}

void BatchPoller::ended(const std::string& id, const std::string& record, std::size_t provider_index,
                        std::string_view output_file) {
  const ProviderConfig& provider = config_->providers[provider_index];
  auto finish = [this, id, record, provider_index](std::map<std::string, BatchUsage> usage) {
    boost::system::error_code ec;
    const bj::value v = readJson(record, ec);
    const bj::object empty;
    const bj::object& o = !ec && v.is_object() ? v.get_object() : empty;
    for (auto& [upstream, u] : usage) {
      u.batch_id = id;
      u.owner = json::strOr(o, "owner", "");
      u.key = json::strOr(o, "key", "");
      u.provider = config_->providers[provider_index].name;
      // The gateway's name for the model the provider ran: a model with a deployment
      // on that provider under that upstream name (the check renamed it so).
      for (const auto& m : config_->models)
        for (const auto& d : m.deployments)
          if (u.model.empty() && d.provider_index == provider_index &&
              (d.upstream_model == upstream || (d.upstream_model.empty() && m.name == upstream)))
            u.model = m.name;
      u.usage.batch = true;
      host_.meterBatch(u);
    }
    store_.eraseRecord(kNamespace, id, [](std::optional<std::string>) {});
    pollNext();
  };
  if (output_file.empty()) {  // failed, expired or cancelled before any answer: nothing ran
    finish({});
    return;
  }
  const std::optional<std::string> bearer = credentials(provider_index);
  if (!bearer) {  // the batch is asked about again next turn
    pollNext();
    return;
  }
  OutboundRequest call = providerCall(provider, "/files/" + std::string(output_file) + "/content", *bearer);
  call.max_response_bytes = kMaxOutputBytes;
  services_.fetch(std::move(call), [this, finish, id](OutboundResponse r) {
    if (stopped_) return;
    if (r.status != 200) {
      log::warn("batch output not read; asking again next turn", {{"batch", id}, {"status", r.status}, {"error", r.error}});
      pollNext();
      return;
    }
    finish(outputUsage(r.body));
  });
}

std::optional<std::string> BatchPoller::credentials(std::size_t provider_index) {
  const ProviderConfig& p = config_->providers[provider_index];
  const ProviderRuntime& runtime = snapshot_->providers[provider_index];
  std::optional<std::string> out;
  std::string why;
  if (!p.usable) {
    why = "its credential is not configured (see the warning at load)";
  } else if (cloud_auth::TokenSlot* slot = runtime.adapter ? runtime.adapter->tokenSlot() : nullptr) {
    auto token = currentCloudToken(*slot, p);
    if (auto* t = std::get_if<std::string>(&token)) out = std::move(*t);
    else why = std::get<Error>(token).message;
  } else {
    out.emplace();  // its key (or none needed)
  }
  if (out) {
    if (uncalled_.erase(p.name)) log::info("batch polls resume", {{"provider", p.name}});
  } else if (uncalled_.insert(p.name).second) {
    log::warn("batch polls skipped until the provider has credentials", {{"provider", p.name}, {"why", why}});
  }
  return out;
}

std::map<std::string, BatchUsage> BatchPoller::outputUsage(std::string_view jsonl) {
  std::map<std::string, BatchUsage> out;
  while (!jsonl.empty()) {
    const std::size_t nl = jsonl.find('\n');
    const std::string_view line = jsonl.substr(0, nl);
    jsonl = nl == std::string_view::npos ? std::string_view{} : jsonl.substr(nl + 1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    boost::system::error_code ec;
    const bj::value v = readJson(line, ec);
    if (ec || !v.is_object()) continue;
    const bj::object* response = json::obj(v.get_object(), "response");
    const bj::object* body = response ? json::obj(*response, "body") : nullptr;
    if (!body) continue;
    BatchUsage& u = out[std::string(json::strOr(*body, "model", ""))];
    ++u.requests;
    const bj::object* usage = json::obj(*body, "usage");
    if (!usage) continue;
    // Chat and completions say prompt/completion tokens; responses and embeddings input/output.
    const std::int64_t in = json::integer(*usage, "prompt_tokens").value_or(json::integer(*usage, "input_tokens").value_or(0));
    const std::int64_t outp = json::integer(*usage, "completion_tokens").value_or(json::integer(*usage, "output_tokens").value_or(0));
    u.usage.prompt_tokens = std::max<std::int64_t>(u.usage.prompt_tokens, 0) + in;
    u.usage.completion_tokens = std::max<std::int64_t>(u.usage.completion_tokens, 0) + outp;
    u.usage.total_tokens = u.usage.prompt_tokens + u.usage.completion_tokens;
  }
  return out;
}

}  // namespace tahua
