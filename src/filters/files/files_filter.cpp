#include "filters/files/files_filter.h"

#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "core/json_read.h"
#include "core/log.h"
#include "core/temp_file.h"
#include "filters/worker_services.h"
#include "request/upload.h"
#include "store/state_store.h"
#include "translate/json_util.h"

namespace tahua {
namespace bj = boost::json;

namespace files {

std::string ownerOf(const RequestContext& ctx) {
  if (ctx.principal.tenant) return ctx.principal.tenant->name;
  if (ctx.principal.key) return "key:" + ctx.principal.key->name;
  return {};
}

std::string fileKey(std::string_view id) {
  std::string k(StateStore::kValuePrefix);
  return k.append("files:").append(id);
}

std::string batchKey(std::string_view id) {
  std::string k(StateStore::kValuePrefix);
  return k.append("batches:").append(id);
}

}  // namespace files

namespace {

constexpr std::size_t kCheckSlice = 1 << 20;        // a batch file is checked 1 MiB per turn of the loop
constexpr std::size_t kMaxLineBytes = 16 << 20;     // one line of a batch file
constexpr std::string_view kBatchUrls[] = {"/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/responses"};

bool isFileObject(Endpoint e) { return e == Endpoint::FileObject || e == Endpoint::FileContent; }

// The checked copy of a batch file: its lines with the models renamed, in a spool of its own.
struct BatchCheck {
  std::uint64_t at = 0, end = 0;  // what is left of the client's file part
  std::size_t line = 0;
  std::string pending;            // a line cut by a slice
  std::string out;                // written in 64 KiB pieces
  std::vector<char> slice;
};

struct FilesState {
  bool deciding = false;
  bool answered = false;
  FilterStatus answer = FilterStatus::Continue;
  const ModelConfig* target = nullptr;  // where the request goes
  std::string id;                       // the file or batch named in the path
  std::string list;                     // a list answer with the items of others taken out
  bool list_ready = false;
  std::size_t waiting = 0;              // store calls in flight
  std::optional<Error> failure;         // the first of them that failed
  std::vector<char> keep;               // of a list's items: owned by the caller
  std::shared_ptr<boost::json::object> page;  // the list page while its items are looked up
  std::unique_ptr<BatchCheck> check;
  Upload upload;                        // a checked batch file (ctx.upload then points here)

  FilesState() = default;
  FilesState(const FilesState&) = delete;
  FilesState& operator=(const FilesState&) = delete;
  ~FilesState() {
    if (upload.fd >= 0) ::close(upload.fd);
  }
};

std::string_view pathId(std::string_view path) {
  // /v1/files/{id}[/content] or /v1/batches/{id}[/cancel]
  path.remove_prefix(path.find('/', 4) + 1);
  return path.substr(0, path.find('/'));
}

Error notFound(bool file, std::string_view id) {
  return Error{ErrorKind::FileNotFound, std::string(file ? "No such File object: " : "No such Batch object: ") + std::string(id)};
}

Error storeUnavailable() {
  return Error{ErrorKind::StoreUnavailable, "The gateway cannot reach its state store to check who owns this; please retry shortly."};
}

class FilesFilter final : public FilterWithState<FilesState> {
 public:
  FilesFilter(StateStore& store, WorkerServices& services) : store_(store), services_(services) {}
  std::string_view name() const override { return "files"; }

  FilterStatus onRequestHeaders(RequestContext& ctx) override {
    if (!fileEndpoint(ctx.endpoint)) return FilterStatus::Continue;
    FilesState& st = state(ctx);
    st.target = ctx.config->files.targetFor(ctx.principal.tenant ? std::string_view(ctx.principal.tenant->name) : std::string_view());
    if (!st.target) {
      ctx.fail(Error{ErrorKind::UnknownPath, "Files and batches are not served by this gateway (it has no files.provider)."});
      return FilterStatus::Stop;
    }
    if (ctx.endpoint == Endpoint::Files || ctx.endpoint == Endpoint::Batches) return FilterStatus::Continue;
    st.id = std::string(pathId(ctx.path));
    return owned(ctx, isFileObject(ctx.endpoint), st.id);
  }

  FilterStatus onRequestBody(RequestContext& ctx) override {
    if (ctx.method != "POST" || (ctx.endpoint != Endpoint::Files && ctx.endpoint != Endpoint::Batches)) return FilterStatus::Continue;
    boost::system::error_code ec;
    const bj::value v = readJson(ctx.body, ec);
    if (ec || !v.is_object()) return invalid(ctx, "The request body must be a JSON object.");
    const bj::object& o = v.get_object();
    if (ctx.endpoint == Endpoint::Batches) {
      const auto input = json::str(o, "input_file_id");
      if (!input || input->empty()) return invalid(ctx, "input_file_id is required.");
      const auto endpoint = json::str(o, "endpoint");
      if (!endpoint || std::find(std::begin(kBatchUrls), std::end(kBatchUrls), *endpoint) == std::end(kBatchUrls))
        return invalid(ctx, "endpoint must be one of /v1/chat/completions, /v1/embeddings, /v1/completions, /v1/responses.");
      // The batch runs where its input file is.
      return owned(ctx, true, *input);
    }
    if (!ctx.upload || !ctx.upload->file("file")) return invalid(ctx, "The form has no 'file' part.");
    const auto purpose = json::str(o, "purpose");
    if (!purpose || purpose->empty()) return invalid(ctx, "purpose is required.");
    if (*purpose != "batch") return FilterStatus::Continue;
    return startBatchCheck(ctx);
  }

  FilterStatus onUpstreamSelect(RequestContext& ctx) override {
    if (!fileEndpoint(ctx.endpoint)) return FilterStatus::Continue;
    ctx.model = state(ctx).target;  // its one deployment is the provider (the balancer picks it)
    return FilterStatus::Continue;
  }

  bool judgesAnswers() const override { return true; }
  bool judgesAnswer(const RequestContext& ctx) const override {
    switch (ctx.endpoint) {
      case Endpoint::Files:
      case Endpoint::Batches: return true;  // an upload or a batch to record; a list to filter
      case Endpoint::BatchObject: return true;  // its output and error files to record
      default: return false;
    }
  }

  FilterStatus onAnswer(RequestContext& ctx) override {
    // The phase runs for every filter once any judges the answer (a guardrail's quality
    // check on a chat answer): only files' and batches' are this filter's.
    if (!fileEndpoint(ctx.endpoint) || !judgesAnswer(ctx)) return FilterStatus::Continue;
    FilesState& st = state(ctx);
    boost::system::error_code ec;
    bj::value v = readJson(*ctx.answer, ec);
    if (ec || !v.is_object()) return FilterStatus::Continue;  // not ours to judge: it goes as it came
    bj::object& o = v.get_object();
    const std::string owner = files::ownerOf(ctx);
    const std::string& provider = st.target->deployments.front().provider;
    const Millis ttl = ctx.config->files.ttl;
    st.deciding = true;
    if (ctx.method == "GET" && (ctx.endpoint == Endpoint::Files || ctx.endpoint == Endpoint::Batches)) {
      filterList(ctx, st, std::move(o), owner);
    } else if (ctx.endpoint == Endpoint::Files) {
      const auto id = json::str(o, "id");
      if (id) {
        bj::object rec{{"owner", owner}, {"provider", provider}, {"kind", "file"}};
        if (const auto purpose = json::str(o, "purpose")) rec["purpose"] = *purpose;
        if (const auto bytes = json::integer(o, "bytes")) rec["bytes"] = *bytes;
        put(ctx, st, files::fileKey(*id), bj::serialize(rec), ttl);
      }
    } else if (ctx.endpoint == Endpoint::Batches) {
      const auto id = json::str(o, "id");
      if (id) {
        bj::object rec{{"owner", owner}, {"provider", provider}, {"kind", "batch"}};
        if (const auto input = json::str(o, "input_file_id")) rec["input_file_id"] = *input;
        if (const auto endpoint = json::str(o, "endpoint")) rec["endpoint"] = *endpoint;
        put(ctx, st, files::batchKey(*id), bj::serialize(rec), ttl);
        // Registered for the batch poller, which meters it when it ends.
        bj::object reg{{"owner", owner}, {"provider", provider}, {"created_at", unixMillis()}};
        if (ctx.principal.key) reg["key"] = ctx.principal.key->name;
        ++st.waiting;
        store_.putRecord("batches", *id, bj::serialize(reg), [this, &ctx, &st](std::optional<std::string> error) {
          if (error) {
            log::error("cannot register a batch for metering", {{"error", *error}, {"request_id", ctx.request_id}});
            if (!st.failure) st.failure = storeUnavailable();
          }
          done(ctx, st);
        });
      }
    } else if (ctx.endpoint == Endpoint::BatchObject) {
      // What the provider made for the batch is the batch owner's to read.
      for (const char* field : {"output_file_id", "error_file_id"})
        if (const auto id = json::str(o, field); id && !id->empty())
          put(ctx, st, files::fileKey(*id),
              bj::serialize(bj::object{{"owner", owner}, {"provider", provider}, {"kind", "file"}, {"purpose", "batch_output"}}), ttl);
    }
    st.deciding = false;
    if (st.waiting == 0) return finished(ctx, st);
    return FilterStatus::Pause;
  }

  void onResponseBody(RequestContext& ctx, std::string& body) override {
    FilesState& st = state(ctx);
    if (st.list_ready) body.swap(st.list);
  }

  void onComplete(RequestContext& ctx) override {
    // A deleted file's record goes with it.
    if (ctx.endpoint == Endpoint::FileObject && ctx.method == "DELETE" && ctx.status >= 200 && ctx.status < 300)
      store_.eraseValue(files::fileKey(state(ctx).id), [](std::optional<std::string>) {});
  }

 private:
  static FilterStatus invalid(RequestContext& ctx, std::string message) {
    ctx.fail(Error{ErrorKind::InvalidRequest, std::move(message)});
    return FilterStatus::Stop;
  }

  // Answers a request phase: at once when still inside it (the store answered in the
  // call), else through the resumer.
  static void settle(RequestContext& ctx, FilesState& st, FilterStatus status) {
    if (st.deciding) {
      st.answered = true;
      st.answer = status;
    } else {
      ctx.resumer->resume(status);
    }
  }

  // Continues only if the caller's owner holds `id`; its provider becomes the target.
  FilterStatus owned(RequestContext& ctx, bool file, std::string_view id) {
    FilesState& st = state(ctx);
    st.deciding = true;
    st.answered = false;
    const std::string wanted(id);
    // Fresh: a file uploaded through another replica a moment ago is used at once.
    store_.getFreshValue(file ? files::fileKey(id) : files::batchKey(id), [&ctx, &st, file, wanted](StateStore::ValueResult r) {
      FilterStatus status = FilterStatus::Continue;
      if (r.status == StateStore::ValueResult::Status::Unavailable) {
        ctx.fail(storeUnavailable());
        status = FilterStatus::Stop;
      } else {
        const ModelConfig* target = nullptr;
        if (r.status == StateStore::ValueResult::Status::Found) {
          boost::system::error_code ec;
          const bj::value v = readJson(r.value, ec);
          if (!ec && v.is_object() && json::strOr(v.get_object(), "owner", "\x01") == files::ownerOf(ctx))
            target = ctx.config->files.targetOf(json::strOr(v.get_object(), "provider", ""));
        }
        if (target) {
          st.target = target;
        } else {
          ctx.fail(notFound(file, wanted));
          status = FilterStatus::Stop;
        }
      }
      settle(ctx, st, status);
    });
    st.deciding = false;
    return st.answered ? st.answer : FilterStatus::Pause;
  }

  void put(RequestContext& ctx, FilesState& st, std::string key, std::string value, Millis ttl) {
    ++st.waiting;
    store_.putValue(key, std::move(value), ttl, [this, &ctx, &st, key](std::optional<std::string> error) {
      if (error) {
        log::error("cannot record who owns a file or batch", {{"key", key}, {"error", *error}, {"request_id", ctx.request_id}});
        if (!st.failure) st.failure = storeUnavailable();
      }
      done(ctx, st);
    });
  }

  void done(RequestContext& ctx, FilesState& st) {
    if (--st.waiting > 0 || st.deciding) return;
    const FilterStatus status = finished(ctx, st);
    ctx.resumer->resume(status);
  }

  static FilterStatus finished(RequestContext& ctx, FilesState& st) {
    if (!st.failure && st.page) rebuildList(st);
    if (!st.failure) return FilterStatus::Continue;
    ctx.fail(std::move(*st.failure));
    return FilterStatus::Stop;
  }

  // A list page: each item's owner is looked up; the page is rebuilt with the caller's.
  void filterList(RequestContext& ctx, FilesState& st, bj::object page, const std::string& owner) {
    bj::value* data = page.if_contains("data");
    if (!data || !data->is_array()) return;
    auto list = std::make_shared<bj::object>(std::move(page));
    bj::array& items = (*list)["data"].get_array();
    st.keep.assign(items.size(), 0);
    const bool file = ctx.endpoint == Endpoint::Files;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto id = items[i].is_object() ? json::str(items[i].get_object(), "id") : std::nullopt;
      if (!id) continue;
      ++st.waiting;
      store_.getValue(file ? files::fileKey(*id) : files::batchKey(*id), [this, &ctx, &st, i, owner](StateStore::ValueResult r) {
        if (r.status == StateStore::ValueResult::Status::Unavailable && !st.failure) st.failure = storeUnavailable();
        if (r.status == StateStore::ValueResult::Status::Found) {
          boost::system::error_code ec;
          const bj::value v = readJson(r.value, ec);
          st.keep[i] = !ec && v.is_object() && json::strOr(v.get_object(), "owner", "\x01") == owner;
        }
        done(ctx, st);
      });
    }
    st.page = std::move(list);  // rebuilt once every lookup answered (finished())
  }

  // The page with the caller's items only: kept for onResponseBody to swap in.
  static void rebuildList(FilesState& st) {
    bj::object& page = *st.page;
    bj::array& all = page["data"].get_array();
    bj::array kept;
    for (std::size_t i = 0; i < all.size(); ++i)
      if (st.keep[i]) kept.push_back(std::move(all[i]));
    const bool any = !kept.empty();
    if (page.contains("first_id")) page["first_id"] = any ? kept.front().as_object().at("id") : bj::value(nullptr);
    if (page.contains("last_id")) page["last_id"] = any ? kept.back().as_object().at("id") : bj::value(nullptr);
    page["data"] = std::move(kept);
    st.list = bj::serialize(page);
    st.list_ready = true;
    st.page.reset();
  }

  // --- A batch file's lines, checked and renamed before the upload goes on. ---

  FilterStatus startBatchCheck(RequestContext& ctx) {
    FilesState& st = state(ctx);
    const Upload& in = *ctx.upload;
    const FormPart& part = *in.file("file");
    std::string error;
    st.upload.fd = openTempFile(spoolDirectory(ctx.config->server.uploads.spool_dir), error);
    if (st.upload.fd < 0) {
      log::error("cannot make a batch file's spool", {{"error", error}});
      ctx.fail(Error{ErrorKind::Overloaded, "The gateway could not store the upload; please retry shortly."});
      return FilterStatus::Stop;
    }
    // The part's own header lines go first, as they came.
    std::string head(part.data_begin - part.head_begin, '\0');
    if (::pread(in.fd, head.data(), head.size(), static_cast<off_t>(part.head_begin)) != static_cast<ssize_t>(head.size()) ||
        !writeAll(st.upload.fd, head)) {
      ctx.fail(Error{ErrorKind::Overloaded, "The gateway could not store the upload; please retry shortly."});
      return FilterStatus::Stop;
    }
    st.upload.boundary = in.boundary;
    FormPart copy = part;
    copy.head_begin = 0;
    copy.data_begin = head.size();
    st.upload.parts.push_back(std::move(copy));
    st.check = std::make_unique<BatchCheck>();
    st.check->at = part.data_begin;
    st.check->end = part.data_end;
    st.check->slice.resize(kCheckSlice);
    const FilterStatus first = checkSlice(ctx, st);
    if (first != FilterStatus::Pause) return first;
    return FilterStatus::Pause;
  }

  // One slice of the file; then the next on a later turn of the loop (other requests of
  // this worker go on between slices), or the verdict.
  FilterStatus checkSlice(RequestContext& ctx, FilesState& st) {
    BatchCheck& c = *st.check;
    const Upload& in = *ctx.upload;
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(c.end - c.at, kCheckSlice));
    const ssize_t got = want ? ::pread(in.fd, c.slice.data(), want, static_cast<off_t>(c.at)) : 0;
    if (got < 0 || static_cast<std::size_t>(got) != want) return failCheck(ctx, st, Error{ErrorKind::Overloaded, "The gateway could not read the upload back; please retry."});
    c.at += want;
    const bool last = c.at >= c.end;
    std::string_view data(c.slice.data(), want);
    while (!data.empty() || (last && !c.pending.empty())) {
      const std::size_t nl = data.find('\n');
      if (nl == std::string_view::npos && !last) {
        if (c.pending.size() + data.size() > kMaxLineBytes) return failCheck(ctx, st, lineError(c.line + 1, "is longer than 16 MiB."));
        c.pending.append(data);
        break;
      }
      std::string_view line;
      if (nl == std::string_view::npos) {
        c.pending.append(data);
        data = {};
        line = c.pending;
      } else if (!c.pending.empty()) {
        c.pending.append(data.substr(0, nl));
        data.remove_prefix(nl + 1);
        line = c.pending;
      } else {
        line = data.substr(0, nl);
        data.remove_prefix(nl + 1);
      }
      ++c.line;
      if (auto err = checkLine(ctx, st, line)) return failCheck(ctx, st, std::move(*err));
      c.pending.clear();
    }
    if (c.out.size() >= 64 * 1024 || last) {
      if (!writeAll(st.upload.fd, c.out)) return failCheck(ctx, st, Error{ErrorKind::Overloaded, "The gateway could not store the upload; please retry shortly."});
      c.out.clear();
    }
    if (!last) {
      services_.post([this, &ctx, &st] {
        const FilterStatus s = checkSlice(ctx, st);
        if (s != FilterStatus::Pause) ctx.resumer->resume(s);
      });
      return FilterStatus::Pause;
    }
    if (c.line == 0) return failCheck(ctx, st, Error{ErrorKind::InvalidRequest, "The batch file is empty."});
    const off_t size = ::lseek(st.upload.fd, 0, SEEK_END);
    st.upload.parts.front().data_end = static_cast<std::uint64_t>(size);
    st.upload.size = static_cast<std::uint64_t>(size);
    ctx.upload = &st.upload;  // what goes upstream: the checked lines
    st.check.reset();
    return FilterStatus::Continue;
  }

  static FilterStatus failCheck(RequestContext& ctx, FilesState& st, Error error) {
    st.check.reset();
    ctx.fail(std::move(error));
    return FilterStatus::Stop;
  }

  static Error lineError(std::size_t line, std::string_view what, ErrorKind kind = ErrorKind::InvalidRequest) {
    return Error{kind, "Line " + std::to_string(line) + " of the batch file " + std::string(what)};
  }

  // One JSONL line: {"custom_id", "method": "POST", "url", "body": {"model", ...}}.
  std::optional<Error> checkLine(RequestContext& ctx, FilesState& st, std::string_view line) {
    BatchCheck& c = *st.check;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) return std::nullopt;  // a blank line
    boost::system::error_code ec;
    bj::value v = readJson(line, ec);
    if (ec || !v.is_object()) return lineError(c.line, "is not a JSON object.");
    bj::object& o = v.get_object();
    const auto url = json::str(o, "url");
    if (!url || std::find(std::begin(kBatchUrls), std::end(kBatchUrls), *url) == std::end(kBatchUrls))
      return lineError(c.line, "has no url of /v1/chat/completions, /v1/embeddings, /v1/completions or /v1/responses.");
    bj::value* body = o.if_contains("body");
    if (!body || !body->is_object()) return lineError(c.line, "has no body object.");
    const auto model_name = json::str(body->get_object(), "model");
    if (!model_name || model_name->empty()) return lineError(c.line, "has no body.model.");
    const std::string name(*model_name);
    const ModelConfig* model = ctx.config->findModel(name);
    if (!model)
      return lineError(c.line, "names the model '" + name + "', which does not exist or you do not have access to it.",
                       ErrorKind::ModelNotFound);
    if (!ctx.principal.allows(model->name))
      return lineError(c.line, "names the model '" + name + "', which this API key may not use.", ErrorKind::ModelNotAllowed);
    const DeploymentConfig& files = st.target->deployments.front();
    const DeploymentConfig* on = nullptr;
    for (const auto& d : model->deployments)
      if (d.provider_index == files.provider_index) on = &d;
    if (!on)
      return lineError(c.line, "names the model '" + name + "', which provider '" + files.provider +
                                   "' (where this gateway's batches run) does not serve.");
    if (!on->upstream_model.empty()) body->get_object()["model"] = on->upstream_model;
    c.out.append(bj::serialize(o)).push_back('\n');
    return std::nullopt;
  }

  static bool writeAll(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  StateStore& store_;
  WorkerServices& services_;
};

}  // namespace

std::unique_ptr<Filter> makeFilesFilter(StateStore& store, WorkerServices& services) {
  return std::make_unique<FilesFilter>(store, services);
}

}  // namespace tahua
