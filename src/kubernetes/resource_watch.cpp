#include "kubernetes/resource_watch.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "core/json_read.h"
#include "core/log.h"
#include "kubernetes/kube_client.h"

namespace tahua {

namespace asio = boost::asio;
namespace bj = boost::json;

const KubeKind kKubeKinds[5] = {
    {"ModelRoute", "modelroutes"}, {"RateLimitPolicy", "ratelimitpolicies"}, {"PromptTemplate", "prompttemplates"},
    {"Plugin", "plugins"},         {"GuardrailPolicy", "guardrailpolicies"},
};

namespace {

std::string stringAt(const bj::object& o, std::string_view key) {
  const bj::value* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

// An object of `kind`: metadata.name, metadata.resourceVersion and the spec.
std::optional<KubeObject> objectOf(const bj::value& v, std::string_view kind, bool need_spec, std::string& error) {
  const bj::object* o = v.if_object();
  if (!o) {
    error = "an object is not a JSON object";
    return std::nullopt;
  }
  const std::string k = stringAt(*o, "kind");
  if (!k.empty() && k != kind) {  // list items may leave kind out
    error = "an object of kind \"" + k + "\" where " + std::string(kind) + " was expected";
    return std::nullopt;
  }
  const bj::value* meta = o->if_contains("metadata");
  if (!meta || !meta->is_object()) {
    error = "an object without metadata";
    return std::nullopt;
  }
  KubeObject out;
  out.name = stringAt(meta->get_object(), "name");
  out.resource_version = stringAt(meta->get_object(), "resourceVersion");
  if (out.name.empty() && need_spec) {
    error = "an object without metadata.name";
    return std::nullopt;
  }
  if (const bj::value* spec = o->if_contains("spec")) out.spec = bj::serialize(*spec);
  else if (need_spec) out.spec = "null";  // applied as an invalid resource, which names it
  return out;
}

}  // namespace

std::optional<KubeList> parseKubeList(std::string_view body, std::string_view kind, std::string& error) {
  boost::system::error_code ec;
  bj::value v = readJson(body, ec);
  if (ec || !v.is_object()) {
    error = "the list is not a JSON object";
    return std::nullopt;
  }
  const bj::object& o = v.get_object();
  KubeList out;
  if (const bj::value* meta = o.if_contains("metadata"); meta && meta->is_object())
    out.resource_version = stringAt(meta->get_object(), "resourceVersion");
  if (out.resource_version.empty()) {
    error = "the list has no metadata.resourceVersion";
    return std::nullopt;
  }
  const bj::value* items = o.if_contains("items");
  if (items && !items->is_null() && !items->is_array()) {
    error = "the list's items are not an array";
    return std::nullopt;
  }
  if (items && items->is_array())
    for (const bj::value& item : items->get_array()) {
      auto obj = objectOf(item, kind, true, error);
      if (!obj) return std::nullopt;
      out.items.push_back(std::move(*obj));
    }
  return out;
}

std::optional<KubeEvent> parseKubeEvent(std::string_view line, std::string_view kind, std::string& error) {
  boost::system::error_code ec;
  bj::value v = readJson(line, ec);
  if (ec || !v.is_object()) {
    error = "a watch line is not a JSON object";
    return std::nullopt;
  }
  const bj::object& o = v.get_object();
  const std::string type = stringAt(o, "type");
  const bj::value* object = o.if_contains("object");
  if (!object || !object->is_object()) {
    error = "a watch event without an object";
    return std::nullopt;
  }
  KubeEvent e;
  if (type == "ERROR") {
    e.type = KubeEvent::Type::Error;
    const bj::object& status = object->get_object();
    if (const bj::value* code = status.if_contains("code"); code && code->is_int64()) e.code = static_cast<int>(code->get_int64());
    e.message = stringAt(status, "message");
    return e;
  }
  if (type == "ADDED") e.type = KubeEvent::Type::Added;
  else if (type == "MODIFIED") e.type = KubeEvent::Type::Modified;
  else if (type == "DELETED") e.type = KubeEvent::Type::Deleted;
  else if (type == "BOOKMARK") e.type = KubeEvent::Type::Bookmark;
  else {
    error = "a watch event of type \"" + type + "\"";
    return std::nullopt;
  }
  // A bookmark carries only metadata.resourceVersion.
  auto obj = objectOf(*object, kind, e.type != KubeEvent::Type::Bookmark, error);
  if (!obj) return std::nullopt;
  e.object = std::move(*obj);
  return e;
}

KubeResourceWatch::KubeResourceWatch(KubeClient& client, Changed changed, KubeWatchStats& stats)
    : client_(client), changed_(std::move(changed)), stats_(stats) {}

std::string KubeResourceWatch::path(const KubeKind& kind) const {
  return "/apis/tahua.dev/v1/namespaces/" + client_.config().namespace_ + "/" + std::string(kind.plural);
}

void KubeResourceWatch::changedSoon() {
  if (change_posted_ || kinds_listed_ < std::size(kKubeKinds)) return;
  change_posted_ = true;
  // After the coroutine that changed something yields: the rest of its read is applied first.
  asio::post(client_.io(), [this] {
    change_posted_ = false;
    if (stopping_) return;
    std::vector<StoredResource> all;
    for (const auto& [kind, objects] : objects_)
      for (const auto& [name, spec] : objects) all.push_back({kind + "/" + name, spec, "kubernetes"});
    stats_.resources.store(all.size());
    changed_(std::move(all));
    // Ready only once the config with them is published, not when the lists are in.
    stats_.listed.store(true);
  });
}

asio::awaitable<void> KubeResourceWatch::watchKind(const KubeKind& kind) {
  asio::steady_timer pause(co_await asio::this_coro::executor);
  const std::string base = path(kind);
  const std::string kind_name(kind.kind);
  bool counted = false;  // towards kinds_listed_
  Millis backoff{500};
  std::string last_error;  // logged once until it changes
  const auto failed = [&](const std::string& what) {
    stats_.errors.fetch_add(1);
    if (what != last_error) log::warn("kubernetes: " + what + "; retrying", {{"kind", kind_name}});
    last_error = what;
  };
  const auto wait = [&]() -> asio::awaitable<bool> {
    pause.expires_after(backoff);
    backoff = std::min(backoff * 2, Millis(30'000));
    auto [ec] = co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
    co_return !ec && !client_.cancelled();
  };
  while (!client_.cancelled()) {
    // List: the whole set, and the version to watch from.
    KubeResponse list = co_await client_.call("GET", base);
    if (client_.cancelled()) break;
    std::string error;
    std::optional<KubeList> parsed;
    if (list.status == 404) {
      // The CRD is not installed: nothing of this kind (retried, in case it comes).
      parsed = KubeList{};
      failed("GET " + base + ": 404 (is the " + kind_name + " CRD installed?)");
    } else if (list.status != 200) {
      failed("GET " + base + ": " + (list.status ? std::to_string(list.status) + " " + list.body.substr(0, 200) : list.error));
      if (!co_await wait()) break;
      continue;
    } else if (!(parsed = parseKubeList(list.body, kind.kind, error))) {
      failed("GET " + base + ": " + error);
      if (!co_await wait()) break;
      continue;
    }
    stats_.lists.fetch_add(1);
    auto& objects = objects_[kind_name];
    objects.clear();
    for (auto& o : parsed->items) objects[o.name] = std::move(o.spec);
    if (!counted) {
      counted = true;
      ++kinds_listed_;
    }
    changedSoon();
    if (list.status == 404) {
      if (!co_await wait()) break;
      continue;
    }
    if (!last_error.empty()) log::info("kubernetes: listing works again", {{"kind", kind_name}});
    last_error.clear();
    backoff = Millis(500);
    // Watch from the list's version until it is gone.
    std::string version = parsed->resource_version;
    bool gone = false;
    while (!gone && !client_.cancelled()) {
      const auto timeout_s = std::max<long long>(1, client_.config().watch_timeout.count() / 1000);
      const std::string target = base + "?watch=1&allowWatchBookmarks=true&resourceVersion=" + version +
                                 "&timeoutSeconds=" + std::to_string(timeout_s);
      std::string bad;
      KubeResponse w = co_await client_.stream(
          target, client_.config().watch_timeout + Millis(30'000), [&](std::string_view line) {
            std::string e;
            auto ev = parseKubeEvent(line, kind.kind, e);
            if (!ev) {
              bad = e;
              return false;
            }
            if (ev->type == KubeEvent::Type::Error) {
              if (ev->code == 410) gone = true;
              else bad = "watch error " + std::to_string(ev->code) + ": " + ev->message;
              return false;
            }
            if (!ev->object.resource_version.empty()) version = ev->object.resource_version;
            if (ev->type == KubeEvent::Type::Bookmark) return true;
            if (ev->type == KubeEvent::Type::Deleted) objects.erase(ev->object.name);
            else objects[ev->object.name] = std::move(ev->object.spec);
            stats_.events.fetch_add(1);
            changedSoon();
            return true;
          });
      if (client_.cancelled()) break;
      if (w.status == 410) gone = true;
      if (gone) break;  // list again
      if (!bad.empty() || w.status != 200 || !w.error.empty()) {
        failed("watch " + base + ": " +
               (!bad.empty() ? bad : w.status && w.status != 200 ? std::to_string(w.status) + " " + w.body.substr(0, 200) : w.error));
        if (!co_await wait()) break;
        if (!bad.empty() || (w.status && w.status != 200)) gone = true;  // start over from a list
        continue;
      }
      backoff = Millis(500);  // the watch ran its course: watch again from where it was
    }
  }
  stopping_ = true;
}

}  // namespace tahua
