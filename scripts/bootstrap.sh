#!/usr/bin/env bash
# Installs what tahua needs to build, run and test, from Debian packages only.
# --test adds what the test suite drives, --fuzz what scripts/fuzz.sh needs.
# Idempotent: packages already present are not touched, apt-get update runs only
# when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev libboost-system1.81-dev
  libssl-dev ca-certificates openssl
  libsimdjson-dev libyaml-cpp-dev libhiredis-dev libc-ares-dev
  liblua5.4-dev libre2-dev libhnswlib-dev libhyperscan-dev libunistring-dev
  libsqlite3-dev libpq-dev
  libgoogle-perftools-dev libsodium-dev
)
if [ "${1:-}" = "--test" ]; then
  # The unit tests and the micro-benchmarks (scripts/start.sh builds only the gateway).
  packages+=(libgtest-dev libgmock-dev libbenchmark-dev)
  # protobuf's parser reads what the OTLP writer wrote (tests/unit/otlp_protobuf_test.cpp;
  # the gateway itself writes protobuf without the library).
  packages+=(libprotobuf-dev protobuf-compiler)
  # Test clients (npm) and the tools the integration tests and benchmarks drive.
  # prometheus: promtool checks the exposition and the alert rules (and Prometheus
  # itself runs the dashboard's queries); chromium: the dashboard's browser test;
  # haproxy: the rolling-update simulation (active health checks, a runtime API); Go,
  # sprig and yaml.v3: deploy/helm/render, which renders the chart as Helm would (Helm
  # itself is not in Debian); json-schema-test-suite: the MCP gateway's argument checks
  # are run against it; postgresql (15) and sqlite3: the spend ledger's databases (the
  # tests start their own server with initdb/pg_ctl and read rows with psql and sqlite3).
  packages+=(nodejs npm redis-server nginx-light wrk dnsmasq-base prometheus chromium haproxy
             golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev
             json-schema-test-suite postgresql sqlite3)
fi
if [ "${1:-}" = "--fuzz" ]; then
  # scripts/fuzz.sh only (not CI): clang and its runtimes, which hold libFuzzer
  # (-fsanitize=fuzzer links libclang_rt.fuzzer) and the ASan/UBSan runtimes.
  packages+=(clang-14 libclang-rt-14-dev)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# Node may come from outside apt on some images; accept any node >= 20 already on PATH.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  filtered=()
  for p in "${missing[@]}"; do
    case "$p" in nodejs|npm) ;; *) filtered+=("$p") ;; esac
  done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi

# valijson (the MCP gateway's JSON Schema checks) is header-only, and tahua uses only its
# Boost.JSON adapter, but Debian's libvalijson-dev depends on the headers of every other
# adapter's library: Qt 5, Poco, jsoncpp, RapidJSON... (177 more packages, 83 MB, over
# half of a fresh machine's apt time). Its package is downloaded and unpacked into
# .deps/ without them (CMakeLists.txt looks there first); an installed one is used as is.
valijson_root="$(cd "$(dirname "$0")/.." && pwd)/.deps/valijson"  # beside CMakeLists.txt, from wherever this runs
need_valijson=0
[ -f /usr/include/valijson/schema.hpp ] || [ -f "$valijson_root/usr/include/valijson/schema.hpp" ] || need_valijson=1

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ "${#missing[@]}" -gt 0 ] || [ "$need_valijson" = 1 ]; then
  $SUDO apt-get update -qq
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}" >&2
  # dpkg without an fsync per file (as Debian's container images do; the 160
  # packages of the first start took 207 s instead of 290 s in a fresh Debian 12 chroot).
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-unsafe-io "${missing[@]}" >/dev/null
fi
if [ "$need_valijson" = 1 ]; then
  echo "bootstrap: unpacking libvalijson-dev's headers into .deps/valijson" >&2
  tmp=$(mktemp -d)
  # apt's download sandbox user must be able to write there.
  chmod 0777 "$tmp"
  (cd "$tmp" && apt-get download -qq libvalijson-dev)
  rm -rf "$valijson_root" && mkdir -p "$valijson_root"
  dpkg-deb -x "$tmp"/libvalijson-dev_*.deb "$valijson_root"
  rm -rf "$tmp"
fi
# The nginx, redis and postgresql packages may start system services; tests start their own on
# ephemeral ports, so stop those to free the default ports (harmless if not running).
if [ "${1:-}" = "--test" ]; then
  (command -v service >/dev/null && service nginx stop; service redis-server stop; service haproxy stop; service postgresql stop) >/dev/null 2>&1 || true
fi
