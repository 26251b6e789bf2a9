// render: `helm template` for one chart, offline. Helm is not packaged in Debian, so this
// is the part of it the tahua chart needs: Go text/template with the sprig functions and
// Helm's own (toYaml, fromYaml, toJson, include, tpl, required, fail), the built-in
// objects (.Values, .Release, .Chart, .Files, .Capabilities, .Template), values.yaml
// deep-merged with -f files, and Helm's output format. No subcharts, no --set, no
// .helmignore, no lookup (nothing here talks to a cluster).
//
//	render [-n NAMESPACE] [-f VALUES.yaml]... [-a GROUP/VERSION]... [--kube-version vX.Y.Z] [--notes] RELEASE CHART_DIR
//
// Build: deploy/helm/render/build.sh (offline, from Debian's Go packages).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/semver/v3"
	"github.com/Masterminds/sprig/v3"
	"gopkg.in/yaml.v3"
)

// The group/versions a Kubernetes 1.31 API server serves without CRDs: what
// .Capabilities.APIVersions.Has reports, plus every -a flag (as `helm template -a`).
var builtinAPIVersions = []string{
	"v1", "admissionregistration.k8s.io/v1", "apiextensions.k8s.io/v1", "apiregistration.k8s.io/v1",
	"apps/v1", "authentication.k8s.io/v1", "authorization.k8s.io/v1", "autoscaling/v1", "autoscaling/v2",
	"batch/v1", "certificates.k8s.io/v1", "coordination.k8s.io/v1", "discovery.k8s.io/v1", "events.k8s.io/v1",
	"flowcontrol.apiserver.k8s.io/v1", "networking.k8s.io/v1", "node.k8s.io/v1", "policy/v1",
	"rbac.authorization.k8s.io/v1", "scheduling.k8s.io/v1", "storage.k8s.io/v1",
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// Files is .Files: every file of the chart outside templates/, Chart.yaml and values.yaml.
type Files map[string][]byte

func (f Files) Get(name string) string      { return string(f[name]) }
func (f Files) GetBytes(name string) []byte { return f[name] }

// APIVersions is .Capabilities.APIVersions. Has takes "group/version" or
// "group/version/Kind"; kinds are not tracked, so the latter checks the group/version only.
type APIVersions []string

func (a APIVersions) Has(v string) bool {
	for _, have := range a {
		if v == have || strings.HasPrefix(v, have+"/") && strings.Count(v, "/") == strings.Count(have, "/")+1 {
			return true
		}
	}
	return false
}

func main() {
	var valueFiles, apiVersions listFlag
	var namespace, kubeVersion string
	var notes bool
	fl := flag.NewFlagSet("render", flag.ExitOnError)
	fl.Var(&valueFiles, "f", "values file merged over the chart's values.yaml (repeatable, later wins)")
	fl.Var(&valueFiles, "values", "same as -f")
	fl.Var(&apiVersions, "a", "an API group/version reported by .Capabilities.APIVersions (repeatable)")
	fl.Var(&apiVersions, "api-versions", "same as -a")
	fl.StringVar(&namespace, "n", "default", "the release namespace")
	fl.StringVar(&namespace, "namespace", "default", "same as -n")
	fl.StringVar(&kubeVersion, "kube-version", "v1.31.0", "the Kubernetes version of .Capabilities.KubeVersion")
	fl.BoolVar(&notes, "notes", false, "print the rendered NOTES.txt after the manifests")

	// Flags may come before, between or after the two positionals, as with helm.
	var positional []string
	for args := os.Args[1:]; ; {
		fl.Parse(args)
		if fl.NArg() == 0 {
			break
		}
		positional = append(positional, fl.Arg(0))
		args = fl.Args()[1:]
	}
	if len(positional) != 2 {
		fmt.Fprintln(os.Stderr, "usage: render [-n NAMESPACE] [-f VALUES]... [-a GROUP/VERSION]... [--notes] RELEASE CHART_DIR")
		os.Exit(2)
	}
	out, err := render(positional[0], namespace, positional[1], valueFiles,
		append(APIVersions{}, append(builtinAPIVersions, apiVersions...)...), kubeVersion, notes)
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", cleanError(err))
		os.Exit(1)
	}
	os.Stdout.WriteString(out)
}

func render(release, namespace, chartDir string, valueFiles []string, apis APIVersions, kubeVersion string, notes bool) (string, error) {
	var meta map[string]any
	if err := readYAML(filepath.Join(chartDir, "Chart.yaml"), &meta); err != nil {
		return "", err
	}
	if meta["apiVersion"] != "v2" || meta["name"] == nil || meta["version"] == nil {
		return "", errors.New("Chart.yaml: apiVersion v2, name and version are required")
	}
	// As helm: a chart's kubeVersion constraint is checked against --kube-version.
	if c, ok := meta["kubeVersion"].(string); ok && c != "" {
		constraint, err := semver.NewConstraint(c)
		if err != nil {
			return "", fmt.Errorf("Chart.yaml: kubeVersion %q: %v", c, err)
		}
		v, err := semver.NewVersion(kubeVersion)
		if err != nil {
			return "", fmt.Errorf("--kube-version %q: %v", kubeVersion, err)
		}
		if !constraint.Check(v) {
			return "", fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", c, kubeVersion)
		}
	}
	// .Chart has the Chart.yaml fields capitalized, as Helm's chart.Metadata.
	chart := map[string]any{}
	for k, v := range meta {
		if k == "apiVersion" {
			k = "APIVersion"
		}
		chart[strings.ToUpper(k[:1])+k[1:]] = v
	}
	chartName := fmt.Sprint(meta["name"])

	values := map[string]any{}
	for _, f := range append([]string{filepath.Join(chartDir, "values.yaml")}, valueFiles...) {
		var v map[string]any
		if err := readYAML(f, &v); err != nil {
			return "", err
		}
		merge(values, v)
	}

	files := Files{}
	templates := map[string]string{} // "<chart>/templates/<path>" -> text
	err := filepath.WalkDir(chartDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(chartDir, path)
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(path)
		switch {
		case err != nil:
			return err
		case strings.HasPrefix(rel, "templates/"):
			templates[chartName+"/"+rel] = string(data)
		case rel != "Chart.yaml" && rel != "values.yaml":
			files[rel] = data
		}
		return nil
	})
	if err != nil {
		return "", err
	}

	// One template set: a define in any file (the helpers in _helpers.tpl) is visible to all.
	root := template.New("chart")
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env") // as Helm: a rendering does not depend on the machine's environment
	delete(funcs, "expandenv")
	includeDepth := 0
	funcs["include"] = func(name string, data any) (string, error) {
		if includeDepth++; includeDepth > 1000 {
			return "", fmt.Errorf("include %q: nested too deep (a template that includes itself?)", name)
		}
		defer func() { includeDepth-- }()
		var b strings.Builder
		err := root.ExecuteTemplate(&b, name, data)
		return b.String(), err
	}
	funcs["tpl"] = func(text string, data any) (string, error) {
		t, err := root.Clone() // the string sees the chart's defines, and adds none to them
		if err == nil {
			t, err = t.New("tpl").Parse(text)
		}
		if err != nil {
			return "", err
		}
		var b strings.Builder
		err = t.Execute(&b, data)
		return strings.ReplaceAll(b.String(), "<no value>", ""), err
	}
	funcs["required"] = func(msg string, v any) (any, error) {
		if s, ok := v.(string); v == nil || ok && s == "" {
			return nil, errors.New(msg)
		}
		return v, nil
	}
	funcs["fail"] = func(msg string) (string, error) { return "", errors.New(msg) }
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = func(s string) map[string]any {
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error() // Helm's convention: the error as a value, not a failure
		}
		return m
	}
	root.Funcs(funcs).Option("missingkey=zero")

	names := make([]string, 0, len(templates))
	for name := range templates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, err := root.New(name).Parse(templates[name]); err != nil {
			return "", err
		}
	}

	top := map[string]any{
		"Values":  values,
		"Release": map[string]any{"Name": release, "Namespace": namespace, "Service": "Helm", "IsInstall": true, "IsUpgrade": false, "Revision": 1},
		"Chart":   chart,
		"Files":   files,
		"Capabilities": map[string]any{
			"APIVersions": apis,
			"KubeVersion": kubeVersionOf(kubeVersion),
		},
	}
	var out, notesText strings.Builder
	docSep := regexp.MustCompile(`(?m)^---[ \t]*$`)
	for _, name := range names {
		base := filepath.Base(name)
		if strings.HasPrefix(base, "_") {
			continue // helpers only
		}
		data := map[string]any{}
		for k, v := range top {
			data[k] = v
		}
		data["Template"] = map[string]any{"Name": name, "BasePath": chartName + "/templates"}
		var b strings.Builder
		if err := root.ExecuteTemplate(&b, name, data); err != nil {
			return "", err
		}
		text := strings.ReplaceAll(b.String(), "<no value>", "")
		if base == "NOTES.txt" {
			notesText.WriteString(text) // rendered so that its errors show; printed on request
			continue
		}
		for _, doc := range docSep.Split(text, -1) {
			if doc = strings.TrimSpace(doc); doc != "" {
				fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", name, doc)
			}
		}
	}
	if notes {
		fmt.Fprintf(&out, "NOTES:\n%s\n", strings.TrimSpace(notesText.String()))
	}
	return out.String(), nil
}

func readYAML(path string, into *map[string]any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// merge sets src over dst as Helm coalesces values: maps merge key by key, anything else
// replaces, and a null removes the key (how a values file switches a default off).
func merge(dst, src map[string]any) {
	for k, v := range src {
		sub, isMap := v.(map[string]any)
		have, hadMap := dst[k].(map[string]any)
		switch {
		case v == nil:
			delete(dst, k)
		case isMap && hadMap:
			merge(have, sub)
		default:
			dst[k] = v
		}
	}
}

// toYAML is Helm's toYaml: block style, two-space indent, no trailing newline; an error
// gives "" (as Helm). yaml.v3 quotes strings YAML 1.1 would read as booleans ("on", "yes").
func toYAML(v any) string {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return ""
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func kubeVersionOf(v string) map[string]any {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	for len(parts) < 2 {
		parts = append(parts, "0")
	}
	return map[string]any{"Version": v, "GitVersion": v, "Major": parts[0], "Minor": parts[1]}
}

// cleanError turns text/template's "template: X:1:2: executing ... error calling fail: MSG"
// into Helm's "execution error at (X:1:2): MSG", naming the innermost template.
func cleanError(err error) string {
	msg := err.Error()
	for _, fn := range []string{"fail", "required"} {
		marker := "error calling " + fn + ": "
		if i := strings.LastIndex(msg, marker); i >= 0 {
			where := regexp.MustCompile(`template: (\S+:\d+:\d+): executing`).FindAllStringSubmatch(msg[:i], -1)
			if len(where) == 0 {
				return msg[i+len(marker):]
			}
			return fmt.Sprintf("execution error at (%s): %s", where[len(where)-1][1], msg[i+len(marker):])
		}
	}
	return msg
}
