#include "admin/endpoint_admin.h"
#include "admin/admin_error.h"

#include <boost/json.hpp>

#include "admin/store_writes.h"
#include "core/json_text.h"
#include "core/log.h"

namespace tahua {
namespace asio = boost::asio;
namespace bj = boost::json;

namespace {

constexpr std::size_t kMaxRegistrations = 10'000;

bool validName(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == ':';
  });
}

bj::object registrationJson(const Registration& r, std::chrono::system_clock::time_point now) {
  bj::value v = bj::parse(registrationToJson(r));
  bj::object& o = v.as_object();
  o.erase("expires_ms");
  o["expires_in_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(r.expires - now).count();
  return o;
}

}  // namespace

std::vector<Registration> EndpointAdmin::registrations(std::chrono::system_clock::time_point now) {
  std::erase_if(regs_, [&](const auto& kv) { return kv.second.expires <= now; });
  std::vector<Registration> out;
  for (const auto& [key, r] : regs_) out.push_back(r);
  return out;
}

bool EndpointAdmin::mergeStore(const std::vector<StateStore::Record>& records) {
  const auto now = std::chrono::system_clock::now();
  bool changed = false;
  std::set<std::string, std::less<>> seen;
  for (const auto& rec : records) {
    auto r = registrationFromRecord(rec.id, rec.json);
    if (!r || r->expires <= now) continue;  // not a registration, or expired (left for the sweep)
    seen.insert(rec.id);
    auto it = regs_.find(rec.id);
    if (it != regs_.end() && it->second.expires >= r->expires) continue;  // what we have is as new
    if (it == regs_.end() && regs_.size() >= kMaxRegistrations) continue;
    regs_[rec.id] = std::move(*r);
    changed = true;
  }
  // Deregistered through another replica: gone from the store, so gone here.
  for (const auto& id : in_store_)
    if (!seen.count(id) && regs_.erase(id)) changed = true;
  in_store_ = std::move(seen);
  return changed;
}

asio::awaitable<std::optional<AdminReply>> EndpointAdmin::handle(const AdminCaller& caller, const Config& config,
                                                                 std::string_view method, std::string_view rest,
                                                                 const std::string& body) {
  constexpr std::string_view kPrefix = "endpoints";
  if (rest.substr(0, kPrefix.size()) != kPrefix || (rest.size() > kPrefix.size() && rest[kPrefix.size()] != '/')) co_return std::nullopt;
  const std::string_view path = rest.substr(std::min(rest.size(), kPrefix.size() + 1));
  const auto now = std::chrono::system_clock::now();
  StateStore& store = host_.store();
  const std::string_view ns = StateStore::kNamespaces[4];
  if (path.empty()) {
    if (method != "GET") co_return adminError(405, "method_not_allowed", "Use GET (or PUT / DELETE on /admin/v1/endpoints/{model}/{id}).");
    bj::array list;
    std::lock_guard lock(host_.lock());
    for (const auto& r : registrations(now)) list.push_back(registrationJson(r, now));
    co_return AdminReply{200, jsonText(bj::object{{"endpoints", std::move(list)}})};
  }
  const auto slash = path.find('/');
  const std::string model(path.substr(0, slash)), id(slash == std::string_view::npos ? "" : path.substr(slash + 1));
  if (model.empty() || !validName(id))
    co_return adminError(400, "invalid_request", "The path is /admin/v1/endpoints/{model}/{id}; an id is 1-128 of [A-Za-z0-9._:-].");
  const std::string key = model + "/" + id;
  const bool shared = store.stats().shared;
  if (method == "PUT") {
    Registration r;
    if (auto e = registrationFromJson(body, config, model, id, now, r)) co_return adminError(400, "invalid_request", *e);
    if (const ModelConfig* m = config.findModel(model))
      for (const auto& d : m->deployments)
        if (d.id == id && d.source != "registration")
          co_return adminError(409, "conflict", "Model '" + model + "' has a deployment '" + id + "' of its own.");
    {
      std::lock_guard lock(host_.lock());
      if (!regs_.count(key) && regs_.size() >= kMaxRegistrations) co_return adminError(429, "too_many_endpoints", "At most 10,000 registrations.");
      const bool fresh = !regs_.count(key);
      regs_[key] = r;
      if (auto err = host_.publish(nullptr, "registration")) co_return adminError(500, "publish_failed", *err);
      if (fresh) audit_.audit(caller, "endpoint.register", key, r.address);
    }
    bool written = false;
    if (shared) {  // every replica routes to it
      auto put = admin_store::put(store, ns, key, registrationToJson(r));
      const auto failure = co_await std::move(put);
      written = !failure;
      if (failure) log::warn("registration not written to the shared store; in force on this replica only", {{"endpoint", key}, {"error", *failure}});
      std::lock_guard lock(host_.lock());
      if (written) in_store_.insert(key);
    }
    bj::object o = registrationJson(r, now);
    o["shared"] = written;
    co_return AdminReply{200, jsonText(o)};
  }
  if (method == "DELETE") {
    {
      std::lock_guard lock(host_.lock());
      if (!regs_.erase(key)) co_return adminError(404, "not_found", "No registration " + key + ".");
      in_store_.erase(key);
      if (auto err = host_.publish(nullptr, "deregistration")) co_return adminError(500, "publish_failed", *err);
    }
    if (shared) {
      auto erase = admin_store::erase(store, ns, key);
      co_await std::move(erase);
    }
    audit_.audit(caller, "endpoint.deregister", key);
    co_return AdminReply{200, jsonText(bj::object{{"deleted", key}})};
  }
  co_return adminError(405, "method_not_allowed", "Use PUT or DELETE.");
}

}  // namespace tahua
