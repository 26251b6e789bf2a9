// tahua: an OpenAI-compatible LLM gateway.
//   tahua                         run with the built-in default config
//   tahua --config FILE           run with FILE
//   tahua --check-config FILE     validate FILE and exit (0 valid, 1 invalid)
//   tahua --listen ADDR:PORT      replace the configured listeners (tests, quick tries)
//   tahua --no-watch              reload only on SIGHUP, not when the config file changes
//   tahua --version               print the version and exit
//   tahua --probe URL             GET an http:// URL (a health check in an image without a
//                                 shell or curl): exit 0 on a 2xx within 2 s, else 1
//   tahua --migrate --config FILE bring the ledger databases of FILE to this version's schema
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include <boost/asio/io_context.hpp>

#include "config/config.h"
#include "core/log.h"
#include "http/http_url.h"
#include "core/malloc_tuning.h"
#include "core/thread_name.h"
#include "net/http_client.h"
#include "providers/snapshot.h"
#include "config/field_table.h"
#include "ledger/ledger.h"
#include "runtime/gateway.h"

namespace {

// On a mistake: the short form, on stderr.
void usage() {
  std::fprintf(stderr,
               "usage: tahua [--config FILE] [--listen ADDR:PORT] [--no-watch]\n"
               "       tahua --check-config FILE | --migrate --config FILE | --config-reference | --version | --probe URL | --help\n");
}

// `tahua --help`: what each flag does, what runs without one, where the guides are.
void help() {
  std::printf(
      "tahua %s: an LLM gateway. One OpenAI- and Anthropic-compatible endpoint in front of\n"
      "model providers and self-hosted inference servers.\n"
      "\n"
      "usage: tahua [--config FILE] [--listen ADDR:PORT] [--no-watch]\n"
      "       tahua --check-config FILE | --migrate --config FILE | --config-reference | --version | --probe URL | --help\n"
      "\n"
      "  --config FILE        run with FILE (YAML; a directory of *.yaml files is merged).\n"
      "                       Without it: the built-in config, a deterministic mock model\n"
      "                       (mock-gpt) on 127.0.0.1:8080, no keys, no network needed.\n"
      "  --listen ADDR:PORT   replace the configured listeners (port 0: any free port).\n"
      "  --no-watch           reload only on SIGHUP, not when the config file changes.\n"
      "  --check-config FILE  validate FILE without starting: exit 0 when valid, else 1\n"
      "                       with file:line:col and the field on stderr.\n"
      "  --migrate            with --config FILE: create or upgrade the schema of the spend\n"
      "                       ledger databases (usage sinks of type sqlite and postgres) and\n"
      "                       exit: 0 when all are at this version's schema (docs/ledger.md).\n"
      "                       A start does the same; this runs it ahead of a rollout.\n"
      "  --config-reference   print every config field (type, default, bounds, reload, what\n"
      "                       it does) as Markdown: docs/configuration.md is this output.\n"
      "  --version            print the version and exit.\n"
      "  --probe URL          GET an http:// URL; exit 0 on a 2xx within 2 s, else 1 (the\n"
      "                       image's health check: it has no shell or curl).\n"
      "  --help, -h           this text.\n"
      "\n"
      "Signals: SIGHUP reloads the config (an invalid one is refused, the last good one\n"
      "serves on); SIGTERM or SIGINT drains (no new connections, streams finish up to\n"
      "server.drain_timeout) and exits 0.\n"
      "\n"
      "Guides: README.md (the map) and docs/ in the source tree; the configuration\n"
      "reference is docs/configuration.md, an annotated example config/tahua.example.yaml.\n",
      TAHUA_VERSION);
}

// GET `url` (plain http): 0 on a 2xx answer, 1 otherwise (said on stderr).
int probe(const std::string& url) {
  std::string why;
  auto parsed = tahua::parseHttpUrl(url, &why);
  if (!parsed) {
    std::fprintf(stderr, "tahua: --probe: %s\n", why.c_str());
    return 2;
  }
  boost::asio::io_context io;
  tahua::OutboundRequest req;
  req.url = std::move(*parsed);
  req.timeout = tahua::Millis(2000);
  int status = 0;
  std::string error;
  tahua::HttpClientOptions one_call;
  one_call.max_idle_per_host = 0;  // nothing kept: io.run() returns with the answer
  tahua::HttpClient client(io, one_call);
  client.fetch(std::move(req), [&](tahua::OutboundResponse r) {
    status = r.status;
    error = r.error;
  });
  io.run();
  if (status >= 200 && status < 300) return 0;
  std::fprintf(stderr, "tahua: --probe %s: %s\n", url.c_str(), status ? ("status " + std::to_string(status)).c_str() : error.c_str());
  return 1;
}

bool parseListen(const std::string& text, tahua::ListenerConfig& out) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  unsigned long p = std::stoul(port);
  if (p > 65535) return false;
  out.address = host;
  out.port = static_cast<std::uint16_t>(p);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  tahua::execWithMallocTuning(argv);  // before anything else: it may run this program again
  tahua::nameProcessAfter(argv[0]);
  std::string config_path;
  std::string check_path;
  std::string listen;
  bool watch = true;
  bool migrate = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--config") config_path = next();
    else if (arg == "--check-config") check_path = next();
    else if (arg == "--listen") listen = next();
    else if (arg == "--no-watch") watch = false;
    else if (arg == "--migrate") migrate = true;
    else if (arg == "--version") {
      std::printf("tahua %s\n", TAHUA_VERSION);
      return 0;
    } else if (arg == "--probe") return probe(next());
    else if (arg == "--config-reference") {
      std::fputs(tahua::schema::reference().c_str(), stdout);
      return 0;
    } else if (arg == "--help" || arg == "-h") {
      help();
      return 0;
    } else {
      std::fprintf(stderr, "tahua: unknown argument \"%s\"\n", arg.c_str());
      usage();
      return 2;
    }
  }

  if (!check_path.empty()) {
    auto result = tahua::loadConfigFile(check_path);
    if (!result.config) {
      std::fprintf(stderr, "%s\n", result.error.c_str());
      return 1;
    }
    for (const auto& w : result.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    std::fprintf(stderr, "%s: ok\n", check_path.c_str());
    return 0;
  }

  if (migrate) {
    if (config_path.empty()) {
      std::fprintf(stderr, "tahua: --migrate needs --config FILE (the config naming the ledger databases)\n");
      return 2;
    }
    auto result = tahua::loadConfigFile(config_path);
    if (!result.config) {
      std::fprintf(stderr, "%s\n", result.error.c_str());
      return 1;
    }
    for (const auto& w : result.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    return tahua::ledger::migrateLedgers(result.config->usage);
  }

  tahua::ConfigSource source;
  source.path = config_path;
  source.watch = watch;
  if (!listen.empty()) {
    tahua::ListenerConfig lc;
    if (!parseListen(listen, lc)) {
      std::fprintf(stderr, "tahua: --listen expects ADDR:PORT, got \"%s\"\n", listen.c_str());
      return 2;
    }
    source.listen = lc;
  }
  std::vector<std::string> warnings;
  auto snapshot = tahua::loadSnapshot(source, warnings);
  if (auto* err = std::get_if<std::string>(&snapshot)) {
    tahua::log::error("invalid config", {{"error", *err}});
    return 1;
  }
  for (const auto& w : warnings) tahua::log::warn(w);
  tahua::releaseFreeMemory();  // what parsing the config freed goes back (see Gateway::reload)
  // Writes to a peer that closed must fail with EPIPE, not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  auto snap = std::get<tahua::SnapshotPtr>(std::move(snapshot));
  tahua::log::info("starting", {{"config", snap->config->source}});
  tahua::Gateway gateway(std::move(snap), std::move(source));
  return gateway.run();
}
