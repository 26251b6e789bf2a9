{{/* Names and labels (Helm's usual scheme: release "tahua" of chart "tahua" is "tahua"). */}}
{{- define "tahua.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tahua.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The bundled Redis: its StatefulSet and headless Service (pod <this>-0 must stay a DNS label). */}}
{{- define "tahua.redisName" -}}
{{- printf "%s-redis" (include "tahua.fullname" . | trunc 57 | trimSuffix "-") -}}
{{- end -}}

{{- define "tahua.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tahua
{{- end -}}

{{- define "tahua.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tahua.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "tahua.labels" -}}
{{ include "tahua.commonLabels" . }}
{{ include "tahua.selectorLabels" . }}
{{- end -}}

{{- define "tahua.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "tahua.name" . }}-redis
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: store
{{- end -}}

{{- define "tahua.redisLabels" -}}
{{ include "tahua.commonLabels" . }}
{{ include "tahua.redisSelectorLabels" . }}
{{- end -}}

{{- define "tahua.configMapName" -}}
{{- .Values.config.existingConfigMap | default (printf "%s-config" (include "tahua.fullname" .)) -}}
{{- end -}}

{{/* The pods' service account: the chart's (<fullname> by default) or one of yours. */}}
{{- define "tahua.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "tahua.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* "true" when tahua calls the Kubernetes API (the config's kubernetes section, the token), else "". */}}
{{- define "tahua.kubernetesApi" -}}
{{- if or .Values.kubernetes.resources .Values.kubernetes.scaleDeployments -}}true{{- end -}}
{{- end -}}

{{- define "tahua.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-secrets" (include "tahua.fullname" .)) -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds, counted by the kubelet from the start of preStop:
preStop sleep + server.drain_timeout + tahua's own hard stop (5 s) + a margin before SIGKILL
(docs/operations.md "Signals": grace > preStop + drain_timeout + 5).
*/}}
{{- define "tahua.terminationGracePeriodSeconds" -}}
{{- add (int .Values.drain.preStopSleepSeconds) (int .Values.drain.timeoutSeconds) 5 (int .Values.drain.marginSeconds) -}}
{{- end -}}

{{/* The config's `store` section, from redis.* (YAML). */}}
{{- define "tahua.store" -}}
{{- $r := .Values.redis -}}
{{- $settings := deepCopy ($r.settings | default (dict)) -}}
{{- range $key := list "url" "sentinel" "cluster" "username" -}}
{{- if hasKey $settings $key -}}
{{- fail (printf "redis.settings.%s: give it as redis.external.%s (or use redis.mode bundled)" $key $key) -}}
{{- end -}}
{{- end -}}
{{- if hasKey $settings "password_env" -}}
{{- fail "redis.settings.password_env: give the Secret as redis.external.existingSecret (the chart sets the variable and names it)" -}}
{{- end -}}
{{- if eq $r.mode "bundled" -}}
{{- $host := printf "%s-0.%s.%s.svc.%s" (include "tahua.redisName" .) (include "tahua.redisName" .) .Release.Namespace .Values.clusterDomain -}}
{{- $_ := set $settings "url" (printf "redis://%s:6379" $host) -}}
{{- toYaml (dict "type" "redis" "redis" $settings) -}}
{{- else if eq $r.mode "external" -}}
{{- $_ := set $settings "url" (required "redis.external.url is required with redis.mode external (redis://[[user]:password@]host[:port][/db])" $r.external.url) -}}
{{- $_ := merge $settings (include "tahua.redisCredentials" (list $r.external "TAHUA_REDIS_PASSWORD") | fromYaml) -}}
{{- if $r.external.sentinel.addresses -}}
{{- $sentinel := dict "addresses" $r.external.sentinel.addresses "master" (required "redis.external.sentinel.master is required with sentinel addresses" $r.external.sentinel.master) -}}
{{- $_ := set $settings "sentinel" (merge $sentinel (include "tahua.redisCredentials" (list $r.external.sentinel "TAHUA_REDIS_SENTINEL_PASSWORD") | fromYaml)) -}}
{{- end -}}
{{- if $r.external.cluster.nodes -}}
{{- $_ := set $settings "cluster" (dict "nodes" $r.external.cluster.nodes) -}}
{{- end -}}
{{- toYaml (dict "type" "redis" "redis" $settings) -}}
{{- else -}}
{{- toYaml (dict "type" "memory" "journal" "/var/lib/tahua/store/journal") -}}
{{- end -}}
{{- end -}}

{{/*
The variables the chart sets from redis.external.existingSecret and
redis.external.sentinel.existingSecret: name -> that values block. The config names them
in password_env, so the password is in no ConfigMap.
*/}}
{{- define "tahua.redisPasswordVars" -}}
{{- $e := .Values.redis.external -}}
{{- if eq .Values.redis.mode "external" -}}
{{- if $e.existingSecret.name }}
TAHUA_REDIS_PASSWORD: {{ toJson $e.existingSecret }}
{{- end }}
{{- if $e.sentinel.existingSecret.name }}
TAHUA_REDIS_SENTINEL_PASSWORD: {{ toJson $e.sentinel.existingSecret }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* username and password_env, as YAML, from (list <redis.external or its sentinel> <the variable>). */}}
{{- define "tahua.redisCredentials" -}}
{{- $block := index . 0 -}}
{{- if $block.existingSecret.name -}}
password_env: {{ index . 1 }}
{{- with $block.username }}
username: {{ toJson . }}
{{- end }}
{{- end -}}
{{- end -}}

{{/*
server.workers, when the config does not set it: the CPU limit (the request without one),
rounded up, at least 1 ("1500m" -> 2). Empty without either: tahua's own default.
*/}}
{{- define "tahua.workers" -}}
{{- $cpu := dig "limits" "cpu" "" (.Values.resources | default dict) | default (dig "requests" "cpu" "" (.Values.resources | default dict)) | toString -}}
{{- if $cpu -}}
{{- $n := 0 -}}
{{- if hasSuffix "m" $cpu -}}
{{- $n = div (add (trimSuffix "m" $cpu | int) 999) 1000 -}}
{{- else -}}
{{- $n = ceil (float64 $cpu) | int -}}
{{- end -}}
{{- max 1 $n -}}
{{- end -}}
{{- end -}}

{{/*
The variable the chart sets from ledger.postgres.existingSecret (the whole connection
string): name -> that block. The ledger sink's dsn_env names it: the DSN is in no ConfigMap.
*/}}
{{- define "tahua.ledgerVars" -}}
{{- $l := .Values.ledger -}}
{{- if and $l.enabled (eq $l.type "postgres") }}
TAHUA_LEDGER_DSN: {{ toJson $l.postgres.existingSecret }}
{{- end -}}
{{- end -}}

{{/* The ledger's PersistentVolumeClaim (type sqlite): yours, or the chart's <fullname>-ledger. */}}
{{- define "tahua.ledgerClaim" -}}
{{- .Values.ledger.sqlite.existingClaim | default (printf "%s-ledger" (include "tahua.fullname" .)) -}}
{{- end -}}

{{/* The usage sink ledger.* stands for (YAML). */}}
{{- define "tahua.ledgerSink" -}}
{{- $l := .Values.ledger -}}
{{- $sink := dict "name" $l.name "type" $l.type "retention" $l.retention "query_max_range" $l.queryMaxRange -}}
{{- if eq $l.type "postgres" -}}
{{- $_ := set $sink "dsn_env" "TAHUA_LEDGER_DSN" -}}
{{- $_ := set $sink "batch" (int $l.postgres.batch) -}}
{{- $_ := set $sink "timeout" $l.postgres.timeout -}}
{{- else -}}
{{- $_ := set $sink "path" (printf "%s/ledger.db" (trimSuffix "/" $l.sqlite.mountPath)) -}}
{{- if gt (int64 $l.sqlite.maxBytes) 0 -}}{{- $_ := set $sink "max_bytes" (int64 $l.sqlite.maxBytes) -}}{{- end -}}
{{- end -}}
{{- toYaml $sink -}}
{{- end -}}

{{/* The tahua.dev/v1 resource files: file name -> [kind, values key]. */}}
{{- define "tahua.resourceFiles" -}}
routes.yaml: [ModelRoute, modelRoutes]
ratelimitpolicies.yaml: [RateLimitPolicy, rateLimitPolicies]
prompttemplates.yaml: [PromptTemplate, promptTemplates]
guardrailpolicies.yaml: [GuardrailPolicy, guardrailPolicies]
{{- end -}}

{{/*
The config directory the chart writes: a YAML mapping file name -> file text. base.yaml gets
server.drain_timeout (from drain.timeoutSeconds) and store (from redis.*); the checks that
the config and the pod agree are here.
*/}}
{{- define "tahua.configFiles" -}}
{{- $files := dict -}}
{{- $resourceFiles := include "tahua.resourceFiles" . | fromYaml -}}
{{- range $name, $content := .Values.config.files -}}
{{- if hasKey $resourceFiles $name -}}
{{- fail (printf "config.files.%s: that file holds tahuaResources.%s" $name (index $resourceFiles $name 1)) -}}
{{- end -}}
{{- if and (ne $name "base.yaml") (kindIs "string" $content) -}}
{{- $text := tpl $content $ -}}
{{- if regexMatch "(?m)^(server|store):" $text -}}
{{- fail (printf "config.files.%s: the server and store sections belong in base.yaml (the chart writes server.drain_timeout and store there)" $name) -}}
{{- end -}}
{{- if regexMatch "(?m)^kubernetes:" $text -}}
{{- fail (printf "config.files.%s.kubernetes: set kubernetes.* instead (the chart writes the section and grants what it needs)" $name) -}}
{{- end -}}
{{- $_ := set $files $name $text -}}
{{- else if and (ne $name "base.yaml") (kindIs "map" $content) -}}
{{- if or (hasKey $content "server") (hasKey $content "store") -}}
{{- fail (printf "config.files.%s: the server and store sections belong in base.yaml (the chart writes server.drain_timeout and store there)" $name) -}}
{{- end -}}
{{- if hasKey $content "kubernetes" -}}
{{- fail (printf "config.files.%s.kubernetes: set kubernetes.* instead (the chart writes the section and grants what it needs)" $name) -}}
{{- end -}}
{{- $_ := set $files $name (toYaml $content) -}}
{{- else if ne $name "base.yaml" -}}
{{- fail (printf "config.files.%s: a mapping or a string (YAML text)" $name) -}}
{{- end -}}
{{- end -}}

{{- $base := index .Values.config.files "base.yaml" | default (dict) -}}
{{- if not (kindIs "map" $base) -}}
{{- fail "config.files.base.yaml must be a mapping: the chart writes server.drain_timeout and store into it" -}}
{{- end -}}
{{- $base = deepCopy $base -}}
{{- $server := get $base "server" | default (dict) -}}
{{- if hasKey $server "drain_timeout" -}}
{{- fail "config.files.base.yaml.server.drain_timeout: set drain.timeoutSeconds instead (the grace period is computed from it)" -}}
{{- end -}}
{{- if hasKey $base "store" -}}
{{- fail "config.files.base.yaml.store: set redis.* instead (the chart writes the store section)" -}}
{{- end -}}
{{- if hasKey $base "kubernetes" -}}
{{- fail "config.files.base.yaml.kubernetes: set kubernetes.* instead (the chart writes the section and grants what it needs)" -}}
{{- end -}}
{{- $_ := set $server "drain_timeout" (printf "%ds" (int .Values.drain.timeoutSeconds)) -}}
{{- if not (hasKey $server "workers") -}}
{{- with include "tahua.workers" . }}{{ $_ := set $server "workers" (int .) }}{{ end -}}
{{- end -}}
{{- $_ := set $base "server" $server -}}
{{- $_ := set $base "store" (include "tahua.store" . | fromYaml) -}}
{{- if include "tahua.kubernetesApi" . -}}
{{- $k := .Values.kubernetes -}}
{{- $section := dict "resources" (eq (toString $k.resources) "true") -}}
{{- with $k.timeout }}{{ $_ := set $section "timeout" . }}{{ end -}}
{{- with $k.watchTimeout }}{{ $_ := set $section "watch_timeout" . }}{{ end -}}
{{- $_ := set $base "kubernetes" $section -}}
{{- end -}}
{{- with $base.listeners -}}
{{- if ne (int (index . 0).port) (int $.Values.containerPort) -}}
{{- fail (printf "config.files.base.yaml.listeners[0].port %v differs from containerPort %v" (index . 0).port $.Values.containerPort) -}}
{{- end -}}
{{- end -}}
{{- with $base.usage -}}
{{- if and .spill_dir (ne (clean .spill_dir) (clean $.Values.usageSpill.mountPath)) -}}
{{- fail (printf "config.files.base.yaml.usage.spill_dir %s differs from usageSpill.mountPath %s (the only writable directory)" .spill_dir $.Values.usageSpill.mountPath) -}}
{{- end -}}
{{- if eq $.Values.redis.mode "none" -}}
{{- range .sinks -}}
{{- if and (eq .type "redis_stream") (not .url) -}}
{{- fail (printf "usage sink %s is a redis_stream without url, and redis.mode none leaves no store.redis.url to default to" .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if .Values.ledger.enabled -}}
{{- $usage := get $base "usage" | default (dict) -}}
{{- range $usage.sinks -}}
{{- if has .type (list "sqlite" "postgres") -}}
{{- fail (printf "config.files.base.yaml.usage.sinks: %s is a %s ledger; set ledger.* instead (the chart adds the sink and what the pod needs for it)" .name .type) -}}
{{- end -}}
{{- end -}}
{{- if not $usage.spill_dir -}}{{- $_ := set $usage "spill_dir" $.Values.usageSpill.mountPath -}}{{- end -}}
{{- $_ := set $usage "sinks" (append ($usage.sinks | default list) (include "tahua.ledgerSink" . | fromYaml)) -}}
{{- $_ := set $base "usage" $usage -}}
{{- end -}}
{{- $_ := set $files "base.yaml" (toYaml $base) -}}

{{- range $file, $what := $resourceFiles -}}
{{- $docs := list -}}
{{- range $i, $r := index $.Values.tahuaResources (index $what 1) -}}
{{- $where := printf "tahuaResources.%s[%d]" (index $what 1) $i -}}
{{- $doc := dict "apiVersion" "tahua.dev/v1" "kind" (index $what 0) "metadata" (dict "name" (required (printf "%s.name is required" $where) $r.name)) "spec" (required (printf "%s.spec is required" $where) $r.spec) -}}
{{- $docs = append $docs (toYaml $doc) -}}
{{- end -}}
{{- if $docs -}}
{{- $_ := set $files $file (join "\n---\n" $docs) -}}
{{- end -}}
{{- end -}}

{{/* Every variable an *_env of the config names must come from the Secret (or the Redis' own). */}}
{{- $text := values $files | join "\n" -}}
{{- $redisVars := merge (include "tahua.redisPasswordVars" . | fromYaml) (include "tahua.ledgerVars" . | fromYaml) -}}
{{- range regexFindAll "[A-Za-z0-9_]*_env: *[\"']?[A-Za-z_][A-Za-z0-9_]*" $text -1 -}}
{{- $var := regexReplaceAll "^[A-Za-z0-9_]*_env: *[\"']?" . "" -}}
{{- if not (or (has $var $.Values.secrets.envVars) (hasKey $redisVars $var)) -}}
{{- fail (printf "the config reads %s (%s) but secrets.envVars does not list it: add it there and to the Secret" $var .) -}}
{{- end -}}
{{- end -}}
{{- toYaml $files -}}
{{- end -}}

{{/* Contradictory or missing values: included once, by deployment.yaml. */}}
{{- define "tahua.validate" -}}
{{- $r := .Values.redis -}}
{{- if not (has $r.mode (list "bundled" "external" "none")) -}}
{{- fail (printf "redis.mode %q: bundled, external or none" $r.mode) -}}
{{- end -}}
{{- $external := or $r.external.url $r.external.sentinel.addresses $r.external.sentinel.master $r.external.cluster.nodes $r.external.username $r.external.existingSecret.name $r.external.sentinel.username $r.external.sentinel.existingSecret.name -}}
{{- if and (ne $r.mode "external") $external -}}
{{- fail (printf "redis.mode %s with redis.external settings: use redis.mode external for an existing Redis (the bundled one needs no url), or remove redis.external" $r.mode) -}}
{{- end -}}
{{- if and $r.external.sentinel.addresses $r.external.cluster.nodes -}}
{{- fail "redis.external: sentinel or cluster, not both" -}}
{{- end -}}
{{- if and $r.external.sentinel.master (not $r.external.sentinel.addresses) -}}
{{- fail "redis.external.sentinel.master without sentinel addresses" -}}
{{- end -}}
{{- if and $r.external.existingSecret.name (regexMatch "^redis://[^/]*@" $r.external.url) -}}
{{- fail "redis.external.url has credentials and redis.external.existingSecret is set: give the password in one place (the Secret)" -}}
{{- end -}}
{{- range $block, $e := dict "redis.external" $r.external "redis.external.sentinel" $r.external.sentinel -}}
{{- if and $e.username (not $e.existingSecret.name) -}}
{{- fail (printf "%s.username without %s.existingSecret: a user needs its password" $block $block) -}}
{{- end -}}
{{- if and $e.existingSecret.name (not $e.existingSecret.key) -}}
{{- fail (printf "%s.existingSecret.key: the Secret's key that holds the password is required" $block) -}}
{{- end -}}
{{- end -}}
{{- if and $r.external.sentinel.existingSecret.name (not $r.external.sentinel.addresses) -}}
{{- fail "redis.external.sentinel.existingSecret without sentinel addresses" -}}
{{- end -}}
{{- if and .Values.rbac.create (include "tahua.kubernetesApi" .) (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) -}}
{{- fail "rbac.create with serviceAccount.create false needs serviceAccount.name: the Role would go to the namespace's default account, which every pod without one of its own runs as" -}}
{{- end -}}
{{- if and .Values.secrets.create .Values.secrets.existingSecret -}}
{{- fail "secrets.create with secrets.existingSecret: the chart makes the Secret, or you name yours, not both" -}}
{{- end -}}
{{- range $k, $_ := .Values.secrets.values -}}
{{- if not $.Values.secrets.create -}}
{{- fail (printf "secrets.values.%s without secrets.create: the values would be ignored" $k) -}}
{{- end -}}
{{- if not (has $k $.Values.secrets.envVars) -}}
{{- fail (printf "secrets.values.%s: not in secrets.envVars (no container variable would read it)" $k) -}}
{{- end -}}
{{- end -}}
{{- if lt (int .Values.drain.preStopSleepSeconds) 1 -}}
{{- fail "drain.preStopSleepSeconds must be at least 1: the endpoint is removed from Services and the ingress meanwhile" -}}
{{- end -}}
{{- if lt (int .Values.drain.marginSeconds) 1 -}}
{{- fail "drain.marginSeconds must be at least 1: the grace period must exceed preStop + drain timeout + 5 s" -}}
{{- end -}}
{{- with .Values.autoscaling -}}
{{- if .enabled -}}
{{- if not ($.Capabilities.APIVersions.Has "autoscaling/v2") -}}
{{- fail "autoscaling.enabled needs autoscaling/v2 (Kubernetes 1.23+)" -}}
{{- end -}}
{{- if or (lt (int .minReplicas) 1) (gt (int .minReplicas) (int .maxReplicas)) -}}
{{- fail (printf "autoscaling: minReplicas %v, maxReplicas %v: need 1 <= min <= max" .minReplicas .maxReplicas) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and .Values.podDisruptionBudget.enabled (eq (toString .Values.podDisruptionBudget.maxUnavailable) "0") -}}
{{- fail "podDisruptionBudget.maxUnavailable 0 would block every node drain" -}}
{{- end -}}
{{- with .Values.ledger -}}
{{- if .enabled -}}
{{- if eq .type "postgres" -}}
{{- $_ := required "ledger.postgres.existingSecret.name is required with ledger.type postgres: a Secret holding the whole connection string (kubectl create secret generic tahua-ledger --from-literal=dsn='postgresql://...')" .postgres.existingSecret.name -}}
{{- else if eq .type "sqlite" -}}
{{- if $.Values.autoscaling.enabled -}}
{{- fail "ledger.type sqlite needs a single replica (one file on one volume, one writer), and autoscaling.enabled would add more: set autoscaling.enabled false and replicas 1, or use ledger.type postgres" -}}
{{- end -}}
{{- if gt (int $.Values.replicas) 1 -}}
{{- fail (printf "ledger.type sqlite needs a single replica (one file on one volume, one writer), not replicas %v: set replicas 1, or use ledger.type postgres for several" $.Values.replicas) -}}
{{- end -}}
{{- else -}}
{{- fail (printf "ledger.type %q: postgres or sqlite" .type) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not .Values.config.existingConfigMap -}}
{{- $_ := include "tahua.configFiles" . -}}
{{- end -}}
{{- end -}}
