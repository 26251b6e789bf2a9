#include "admin/resource_admin.h"
#include "admin/admin_error.h"

#include <boost/json.hpp>

#include <thread>

#include "admin/store_writes.h"
#include "core/json_read.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/thread_name.h"

namespace tahua {
namespace asio = boost::asio;
namespace bj = boost::json;

namespace {

constexpr std::size_t kMaxResources = 10'000;

std::vector<StoredResource> asResources(const std::vector<StateStore::Record>& records) {
  std::vector<StoredResource> out;
  for (const auto& r : records) out.push_back({r.id, r.json});
  return out;
}

// Does the config file itself declare this resource?
// Runs `fn` on a thread of its own and resumes the coroutine with its result on its own
// executor: checking resources compiles plugins and runs their top level (up to their
// CPU budget), which must not hold the worker that serves the admin request.
template <class Fn>
asio::awaitable<std::invoke_result_t<Fn>> offWorker(Fn fn) {
  using Result = std::invoke_result_t<Fn>;
  auto op = admin_store::await<Result>([fn = std::move(fn)](std::function<void(Result)> done) mutable {
    std::thread([fn = std::move(fn), done = std::move(done)]() mutable {
      nameThisThread("tahua-admin");
      done(fn());
    }).detach();
  });
  Result r = co_await std::move(op);
  co_return r;
}

std::string_view phaseList(std::uint8_t phases, std::string& out) {
  for (auto [bit, name] : {std::pair<std::uint8_t, const char*>{kPluginRequest, "request"},
                           {kPluginResponseHeaders, "response_headers"},
                           {kPluginStreamEvent, "stream_event"},
                           {kPluginComplete, "complete"},
                           {kPluginAuth, "auth"}})
    if (phases & bit) out += (out.empty() ? "" : ",") + std::string(name);
  return out;
}

}  // namespace

asio::awaitable<std::optional<AdminReply>> ResourceAdmin::handle(const AdminCaller& caller, std::string_view method,
                                                                 std::string_view rest, const std::string& body) {
  // /admin/v1/plugins: the plugins in force; /admin/v1/plugins/{id} stands for
  // /admin/v1/resources/Plugin/{id}.
  std::string alias;
  if (rest == "plugins" || rest == "plugins/") {
    if (method != "GET") co_return adminError(405, "method_not_allowed", "Use GET (or PUT / DELETE on /admin/v1/plugins/{id}).");
    auto list = co_await pluginList();
    co_return list;
  }
  if (rest.substr(0, 8) == "plugins/") {
    alias = "resources/Plugin/" + std::string(rest.substr(8));
    rest = alias;
  }
  constexpr std::string_view kPrefix = "resources";
  if (rest.substr(0, kPrefix.size()) != kPrefix || (rest.size() > kPrefix.size() && rest[kPrefix.size()] != '/')) co_return std::nullopt;
  std::string_view path = rest.substr(std::min(rest.size(), kPrefix.size() + 1));
  StateStore& store = host_.store();
  const std::string_view ns = StateStore::kNamespaces[2];

  if (path.empty()) {
    if (method != "GET") co_return adminError(405, "method_not_allowed", "Use GET (or PUT / DELETE on /admin/v1/resources/{Kind}/{name}).");
    const auto records = store.records(ns);
    StoredResourcesResult applied;
    {
      std::lock_guard lock(host_.lock());
      applied = applyStoredResources(host_.baseConfig(), asResources(records));
      const Config& base = *host_.baseConfig();
      bj::array list;
      for (const auto& r : records) {
        const auto slash = r.id.find('/');
        const std::string kind = r.id.substr(0, slash), name = slash == std::string::npos ? "" : r.id.substr(slash + 1);
        bj::object o{{"kind", kind}, {"name", name}, {"state", "applied"}};
        boost::system::error_code ec;
        bj::value spec = readJson(r.json, ec);
        o["spec"] = ec ? bj::value(r.json) : spec;
        if (declaredInFile(base, kind, name)) o["state"] = "shadowed";
        for (const auto& [id, e] : applied.rejected)
          if (id == r.id) {
            o["state"] = "invalid";
            o["error"] = e;
          }
        list.push_back(std::move(o));
      }
      co_return AdminReply{200, jsonText(bj::object{{"resources", std::move(list)}})};
    }
  }

  const auto slash = path.find('/');
  const std::string kind(path.substr(0, slash));
  const std::string name(slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1));
  if (!storedResourceKind(kind))
    co_return adminError(404, "unknown_kind", "Unknown resource kind '" + kind + "' (ModelRoute | RateLimitPolicy | PromptTemplate | Plugin | GuardrailPolicy).");
  if (!storedResourceName(name))
    co_return adminError(400, "invalid_name", "A resource name is 1-128 letters, digits, '-', '_' or '.'.");
  const std::string id = kind + "/" + name;

  if (method == "GET") {
    for (const auto& r : store.records(ns))
      if (r.id == id) {
        boost::system::error_code ec;
        bj::value spec = readJson(r.json, ec);
        co_return AdminReply{200, jsonText(bj::object{{"kind", kind}, {"name", name}, {"spec", ec ? bj::value(r.json) : spec}})};
      }
    co_return adminError(404, "not_found", "No stored resource " + id + ".");
  }

  if (method == "PUT") {
    boost::system::error_code ec;
    bj::value spec = readJson(body, ec);
    if (ec || !spec.is_object()) co_return adminError(400, "invalid_json", "The body must be the resource's spec, a JSON object.");
    std::string json = bj::serialize(spec);
    auto records = store.records(ns);
    std::erase_if(records, [&](const StateStore::Record& r) { return r.id == id; });
    if (records.size() >= kMaxResources) co_return adminError(409, "too_many_resources", "At most 10,000 stored resources.");
    records.push_back({id, json});
    // Checked over the config in force, with every other stored resource, before it is
    // stored: a resource that would not apply never reaches the other replicas.
    auto check = offWorker([this, &kind, &name, &id, &records]() -> std::optional<AdminReply> {
      std::lock_guard lock(host_.lock());
      if (declaredInFile(*host_.baseConfig(), kind, name))
        return adminError(409, "declared_in_config", id + " is declared in the config file; change it there.");
      auto applied = applyStoredResources(host_.baseConfig(), asResources(records));
      for (const auto& [rid, e] : applied.rejected)
        if (rid == id) return adminError(400, "invalid_resource", e);
      return std::nullopt;
    });
    if (auto refused = co_await std::move(check)) co_return *refused;
    auto write = admin_store::put(store, ns, id, json);
    if (auto e = co_await std::move(write)) co_return adminError(503, "store_unavailable", *e);
    co_await republish();
    // The spec's size, not its text: a plugin's settings may hold a credential.
    audit_.audit(caller, "resource.put", id, "spec of " + std::to_string(json.size()) + " bytes");
    co_return AdminReply{200, jsonText(bj::object{{"kind", kind}, {"name", name}, {"spec", spec}})};
  }

  if (method == "DELETE") {
    const auto records = store.records(ns);
    if (std::none_of(records.begin(), records.end(), [&](const auto& r) { return r.id == id; }))
      co_return adminError(404, "not_found", "No stored resource " + id + ".");
    auto write = admin_store::erase(store, ns, id);
    if (auto e = co_await std::move(write)) co_return adminError(503, "store_unavailable", *e);
    co_await republish();
    audit_.audit(caller, "resource.delete", id);
    co_return AdminReply{200, jsonText(bj::object{{"deleted", id}})};
  }
  co_return adminError(405, "method_not_allowed", "Use GET, PUT or DELETE.");
}

asio::awaitable<void> ResourceAdmin::republish() {
  auto op = offWorker([this] {
    std::lock_guard lock(host_.lock());
    host_.resourcesChanged();
    return true;
  });
  co_await std::move(op);
}

asio::awaitable<AdminReply> ResourceAdmin::pluginList() {
  const auto records = host_.store().records(StateStore::kNamespaces[2]);
  auto op = offWorker([this, &records] {
    std::lock_guard lock(host_.lock());
    const ConfigPtr base = host_.baseConfig();
    const StoredResourcesResult applied = applyStoredResources(base, asResources(records));
    bj::array list;
    for (const PluginConfig& p : applied.config->plugins) {
      std::string phases;
      phaseList(p.phases, phases);
      const bool stored = std::none_of(base->plugins.begin(), base->plugins.end(), [&](const PluginConfig& f) { return f.id == p.id; });
      bj::object entry{{"id", p.id},
                       {"version", p.version},
                       {"order", p.order},
                       {"phases", phases},
                       {"failure_mode", p.fail_closed ? "closed" : "open"},
                       {"source", stored ? "store" : "config"},
                       {"origin", p.origin},
                       {"state", "applied"}};
      if (!p.canary.of.empty()) entry["canary"] = bj::object{{"of", p.canary.of}, {"percent", p.canary.percent}};
      list.push_back(std::move(entry));
    }
    for (const auto& [id, e] : applied.rejected)
      if (id.rfind("Plugin/", 0) == 0) list.push_back(bj::object{{"id", id.substr(7)}, {"source", "store"}, {"state", "invalid"}, {"error", e}});
    return AdminReply{200, jsonText(bj::object{{"plugins", std::move(list)}})};
  });
  AdminReply reply = co_await std::move(op);
  co_return reply;
}

}  // namespace tahua
