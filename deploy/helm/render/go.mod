// The renderer's dependencies, as Debian packages them (golang-github-masterminds-sprig-dev,
// golang-gopkg-yaml.v3-dev, under /usr/share/gocode). build.sh builds in GOPATH mode, where
// this file is what lets the /v3 import of sprig resolve to Debian's directory without the
// /v3 element ("minimal module compatibility" applies only inside a tree with a go.mod).
// A module-mode build would need every module of sprig's unpruned graph, test-only ones
// included (check.v1, quicktest, go-cmp, ...), which Debian does not ship.
module tahua.dev/helm-render

go 1.19

require (
	github.com/Masterminds/sprig/v3 v3.2.3
	gopkg.in/yaml.v3 v3.0.1
)
