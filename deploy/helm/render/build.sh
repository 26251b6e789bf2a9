#!/usr/bin/env bash
# Builds the chart renderer offline: build.sh OUTPUT_BINARY
# Needs Debian's golang-go, golang-github-masterminds-sprig-dev and golang-gopkg-yaml.v3-dev
# (scripts/bootstrap.sh --test). Their sources are under /usr/share/gocode, a GOPATH tree,
# so this builds in GOPATH mode from a temporary GOPATH holding main.go and go.mod (see
# go.mod for why the latter matters); no module is looked up or downloaded.
set -euo pipefail
out=${1:?usage: build.sh OUTPUT_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
command -v go >/dev/null || { echo "build.sh: no go on PATH (apt-get install golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev)" >&2; exit 1; }
[ -d /usr/share/gocode/src/github.com/Masterminds/sprig ] && [ -d /usr/share/gocode/src/gopkg.in/yaml.v3 ] || {
  echo "build.sh: sprig or yaml.v3 missing under /usr/share/gocode (apt-get install golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev)" >&2; exit 1; }
gopath=$(mktemp -d)
trap 'rm -rf "$gopath"' EXIT
mkdir -p "$gopath/src/tahua-render"
cp "$here/main.go" "$here/go.mod" "$gopath/src/tahua-render/"
# go needs a build cache; without HOME (some CI shells) it has no default.
[ -n "${GOCACHE:-}" ] || [ -n "${HOME:-}" ] || export GOCACHE="$gopath/cache"
GO111MODULE=off GOPATH="$gopath:/usr/share/gocode" GOFLAGS= GOPROXY=off GOTOOLCHAIN=local \
  go build -trimpath -o "$out" tahua-render
