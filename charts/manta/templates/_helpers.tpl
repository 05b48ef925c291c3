{{/* The prefix of every object's name: fullnameOverride, else the release name when it already holds the name (nameOverride or
"manta"), else <release>-<name>. */}}
{{- define "manta.name" -}}
{{- default "manta" .Values.nameOverride | trunc 48 | trimSuffix "-" -}}
{{- end -}}

{{- define "manta.fullname" -}}
{{- $name := include "manta.name" . -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 48 | trimSuffix "-" -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 48 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 48 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "manta.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Labels on every object; selectorLabels with a component are what Deployments and Services select on. */}}
{{- define "manta.labels" -}}
app.kubernetes.io/name: {{ include "manta.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: manta
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "manta.selectorLabels" -}}
app.kubernetes.io/name: {{ include "manta.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The restricted Pod Security Standard, which Manta's own pods meet. */}}
{{- define "manta.podSecurityContext" -}}
runAsNonRoot: true
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "manta.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop:
  - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
manta.splitRules splits the rules of a generated ClusterRole (files/*.yaml, copied from config/rbac by
make generate) into those on cluster-scoped resources (which only a ClusterRole can grant) and the rest.
Returns YAML {cluster: [...], namespaced: [...]}.
*/}}
{{- define "manta.splitRules" -}}
{{- $clusterScoped := list "nodes" "namespaces" "persistentvolumes" "customresourcedefinitions" "clusterroles" "clusterrolebindings" "priorityclasses" "storageclasses" "runtimeclasses" "ingressclasses" "certificatesigningrequests" "tokenreviews" "subjectaccessreviews" "selfsubjectaccessreviews" "selfsubjectrulesreviews" "validatingwebhookconfigurations" "mutatingwebhookconfigurations" "apiservices" -}}
{{- $cluster := list -}}
{{- $namespaced := list -}}
{{- range .rules -}}
{{- if .nonResourceURLs -}}
{{- $cluster = append $cluster . -}}
{{- else -}}
{{- $c := list -}}
{{- $n := list -}}
{{- range .resources -}}
{{- if has (first (splitList "/" .)) $clusterScoped -}}
{{- $c = append $c . -}}
{{- else -}}
{{- $n = append $n . -}}
{{- end -}}
{{- end -}}
{{- if $c -}}{{- $cluster = append $cluster (set (deepCopy .) "resources" $c) -}}{{- end -}}
{{- if $n -}}{{- $namespaced = append $namespaced (set (deepCopy .) "resources" $n) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- dict "cluster" $cluster "namespaced" $namespaced | toYaml -}}
{{- end -}}

{{/*
manta.same takes (list kuberayName kuberayValue mantaName mantaValue default): the two values are one setting under
KubeRay's name and Manta's. It fails when both are set and differ, and returns the one set (or the default) as JSON.
A null value is unset (Helm drops null keys), and so is an empty list or map.
*/}}
{{- define "manta.same" -}}
{{- $kn := index . 0 }}{{ $kv := index . 1 }}{{ $mn := index . 2 }}{{ $mv := index . 3 }}{{ $def := index . 4 -}}
{{- $kset := not (or (kindIs "invalid" $kv) (and (or (kindIs "map" $kv) (kindIs "slice" $kv)) (empty $kv))) -}}
{{- $mset := not (or (kindIs "invalid" $mv) (and (or (kindIs "map" $mv) (kindIs "slice" $mv)) (empty $mv))) -}}
{{- if and $kset $mset (ne (toJson $kv) (toJson $mv)) -}}
{{- fail (printf "values %s (%s) and %s (%s) are one setting, KubeRay's name and Manta's, and disagree: set one of them, or both the same" $kn (toJson $kv) $mn (toJson $mv)) -}}
{{- end -}}
{{- if $mset }}{{ toJson (dict "v" $mv) }}{{ else if $kset }}{{ toJson (dict "v" $kv) }}{{ else }}{{ toJson (dict "v" $def) }}{{ end -}}
{{- end -}}

{{/* manta.merge takes (list aName a bName b): the union of two string maps, failing on a key they give different values. */}}
{{- define "manta.merge" -}}
{{- $an := index . 0 }}{{ $a := index . 1 | default dict }}{{ $bn := index . 2 }}{{ $b := index . 3 | default dict -}}
{{- range $k, $v := $b -}}
{{- if and (hasKey $a $k) (ne (toString (index $a $k)) (toString $v)) -}}
{{- fail (printf "values %s and %s both set %q, to %q and %q: give it one value" $an $bn $k (toString (index $a $k)) (toString $v)) -}}
{{- end -}}
{{- end -}}
{{- toJson (dict "v" (merge (deepCopy $a) $b)) -}}
{{- end -}}

{{/* manta.env returns (as JSON) the value of the operator env entry name, null when absent; it fails on a valueFrom entry, which the chart cannot compare with its own value. */}}
{{- define "manta.env" -}}
{{- $root := index . 0 }}{{ $name := index . 1 }}{{ $value := dict -}}
{{- range $root.Values.env -}}
{{- if eq .name $name -}}
{{- if hasKey . "valueFrom" -}}
{{- fail (printf "env %s comes from valueFrom: the chart sets it as a value of its own; give it as value" $name) -}}
{{- end -}}
{{- $_ := set $value "v" (toString .value) -}}
{{- end -}}
{{- end -}}
{{- toJson $value -}}
{{- end -}}

{{/*
manta.settings resolves the operator's settings that KubeRay's values and Manta's share (see values.yaml) into one
dict, as JSON; every template reads them from here so each pair is checked in one place.
*/}}
{{- define "manta.settings" -}}
{{- $v := .Values -}}
{{- $op := $v.operator -}}
{{- $s := dict -}}
{{- $_ := set $s "replicas" (include "manta.same" (list "replicas" $v.replicas "operator.replicas" $op.replicas 1) | fromJson).v -}}
{{- $_ = set $s "leaderElection" (include "manta.same" (list "leaderElectionEnabled" $v.leaderElectionEnabled "operator.leaderElection" $op.leaderElection true) | fromJson).v -}}
{{- $_ = set $s "useKubernetesProxy" (include "manta.same" (list "useKubernetesProxy" $v.useKubernetesProxy "operator.useKubernetesProxy" $op.useKubernetesProxy false) | fromJson).v -}}
{{- $_ = set $s "reconcileConcurrency" (include "manta.same" (list "reconcileConcurrency" $v.reconcileConcurrency "operator.reconcileConcurrency" $op.reconcileConcurrency 8) | fromJson).v -}}
{{- $kc := $v.kubeClient | default dict -}}
{{- $_ = set $s "qps" (include "manta.same" (list "kubeClient.qps" $kc.qps "operator.qps" $op.qps 100) | fromJson).v -}}
{{- $_ = set $s "burst" (include "manta.same" (list "kubeClient.burst" $kc.burst "operator.burst" $op.burst 200) | fromJson).v -}}
{{- $bs := $v.batchScheduler | default dict -}}
{{- if and $bs.enabled $bs.name -}}
{{- fail (printf "values batchScheduler.enabled and batchScheduler.name (%s) are both set: enabled is the deprecated spelling of name: volcano; set name only (KubeRay's operator refuses both too)" $bs.name) -}}
{{- end -}}
{{- $kbs := $bs.name | default nil -}}
{{- if $bs.enabled }}{{ $kbs = "volcano" }}{{ end -}}
{{- $_ = set $s "batchScheduler" (include "manta.same" (list "batchScheduler.name" $kbs "operator.batchScheduler" ($op.batchScheduler | default nil) "") | fromJson).v -}}
{{- $watch := (include "manta.same" (list "watchNamespace" $v.watchNamespace "watchNamespaces" $v.watchNamespaces list) | fromJson).v -}}
{{- if and $v.singleNamespaceInstall (not $watch) }}{{ $watch = list .Release.Namespace }}{{ end -}}
{{- $_ = set $s "watch" $watch -}}
{{- $_ = set $s "nodeSelector" (include "manta.merge" (list "nodeSelector" $v.nodeSelector "operator.nodeSelector" $op.nodeSelector) | fromJson).v -}}
{{- $_ = set $s "tolerations" (include "manta.same" (list "tolerations" $v.tolerations "operator.tolerations" $op.tolerations list) | fromJson).v -}}
{{- $_ = set $s "affinity" (include "manta.same" (list "affinity" $v.affinity "operator.affinity" $op.affinity dict) | fromJson).v -}}
{{- $_ = set $s "priorityClassName" (include "manta.same" (list "priorityClassName" ($v.priorityClassName | default nil) "operator.priorityClassName" ($op.priorityClassName | default nil) "") | fromJson).v -}}
{{- /* operator.resources keeps a default map, which Helm merges a partial override into; so it counts as set only when it differs from that default. */ -}}
{{- $defRes := dict "requests" (dict "cpu" "100m" "memory" "256Mi") "limits" (dict "cpu" "2" "memory" "1Gi") -}}
{{- $opRes := $op.resources | default dict -}}
{{- $_ = set $s "resources" (include "manta.same" (list "resources" $v.resources "operator.resources" (ternary nil $opRes (eq (toJson $opRes) (toJson $defRes))) $opRes) | fromJson).v -}}
{{- $_ = set $s "podLabels" (include "manta.merge" (list "labels" $v.labels "operator.podLabels" $op.podLabels) | fromJson).v -}}
{{- $_ = set $s "podAnnotations" (include "manta.merge" (list "annotations" $v.annotations "operator.podAnnotations" $op.podAnnotations) | fromJson).v -}}
{{- /* Chart-owned label keys: a value may not set them (they select the pods, or say what made the object). */ -}}
{{- $own := include "manta.labels" . | fromYaml -}}
{{- $_ = set $own "app.kubernetes.io/component" "" -}}
{{- range $k, $_ := $v.labels | default dict -}}
{{- if hasKey $own $k -}}
{{- fail (printf "label %s (in labels, which go on the Deployment and its pod) is set by the chart itself: choose another key" $k) -}}
{{- end -}}
{{- end -}}
{{- range $k, $_ := $s.podLabels -}}
{{- if has $k (list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component") -}}
{{- fail (printf "label %s (in operator.podLabels) selects the operator's pods and is set by the chart: choose another key" $k) -}}
{{- end -}}
{{- end -}}
{{- /* The environment variables the operator reads that chart values also set: env and the value must agree. */ -}}
{{- $_ = set $s "clusterDomain" (include "manta.same" (list "env CLUSTER_DOMAIN" (include "manta.env" (list . "CLUSTER_DOMAIN") | fromJson).v "operator.clusterDomain" $op.clusterDomain "cluster.local") | fromJson).v -}}
{{- $cleanup := (include "manta.env" (list . "ENABLE_GCS_FT_REDIS_CLEANUP") | fromJson).v -}}
{{- if not (kindIs "invalid" $cleanup) }}{{ $cleanup = not (eq (lower $cleanup) "false") }}{{ end -}}
{{- $_ = set $s "gcsFtRedisCleanup" (include "manta.same" (list "env ENABLE_GCS_FT_REDIS_CLEANUP" $cleanup "operator.gcsFtRedisCleanup" $op.gcsFtRedisCleanup true) | fromJson).v -}}
{{- $gogc := (include "manta.env" (list . "GOGC") | fromJson).v -}}
{{- if and (not (kindIs "invalid" $gogc)) (not (kindIs "invalid" $op.gcPercent)) (ne $gogc (toString $op.gcPercent)) -}}
{{- fail (printf "env GOGC (%s) and operator.gcPercent (%v) are one setting and disagree: set one of them, or both the same" $gogc $op.gcPercent) -}}
{{- end -}}
{{- /* GOGC alone: the operator reads it when --gc-percent is not given. */ -}}
{{- $_ = set $s "gcPercent" (ternary nil ($op.gcPercent | default 60) (and (not (kindIs "invalid" $gogc)) (kindIs "invalid" $op.gcPercent))) -}}
{{- $maxprocs := (include "manta.env" (list . "GOMAXPROCS") | fromJson).v -}}
{{- if and (not (kindIs "invalid" $maxprocs)) (not (kindIs "invalid" $op.adaptiveProcs)) $op.adaptiveProcs -}}
{{- fail (printf "env GOMAXPROCS (%s) fixes the operator's GOMAXPROCS, and operator.adaptiveProcs=true adapts it: choose one" $maxprocs) -}}
{{- end -}}
{{- $_ = set $s "adaptiveProcs" (and (kindIs "invalid" $maxprocs) (or (kindIs "invalid" $op.adaptiveProcs) $op.adaptiveProcs)) -}}
{{- /* Metrics and the ServiceMonitor. */ -}}
{{- $m := $v.metrics | default dict -}}
{{- $ksm := $m.serviceMonitor | default dict -}}
{{- $_ = set $s "metrics" (or (kindIs "invalid" $m.enabled) $m.enabled) -}}
{{- $_ = set $s "smEnabled" (include "manta.same" (list "metrics.serviceMonitor.enabled" $ksm.enabled "serviceMonitor.enabled" $v.serviceMonitor.enabled false) | fromJson).v -}}
{{- $_ = set $s "smInterval" (include "manta.same" (list "metrics.serviceMonitor.interval" $ksm.interval "serviceMonitor.interval" $v.serviceMonitor.interval "30s") | fromJson).v -}}
{{- $_ = set $s "smLabels" (include "manta.merge" (list "metrics.serviceMonitor.additionalLabels" $ksm.additionalLabels "serviceMonitor.labels" $v.serviceMonitor.labels) | fromJson).v -}}
{{- /* The operator's identity. */ -}}
{{- $_ = set $s "component" (default "operator" $v.componentOverride) -}}
{{- $sa := $v.serviceAccount | default dict -}}
{{- $create := or (kindIs "invalid" $sa.create) $sa.create -}}
{{- $_ = set $s "createServiceAccount" $create -}}
{{- $_ = set $s "serviceAccount" (ternary (default (printf "%s-operator" (include "manta.fullname" .)) $sa.name) (default "default" $sa.name) $create) -}}
{{- /* The gates Manta cannot switch (internal/features): the operator would refuse them at start; say so now. */ -}}
{{- $fixed := dict "SidecarSubmitterRestart" (list false "Manta sets no restart policy on a SidecarMode submitter") "KubernetesWAS" (list false "Manta has no Kubernetes workload-aware scheduling: use batchScheduler") -}}
{{- range $g := $v.featureGates -}}
{{- if hasKey $fixed $g.name -}}
{{- $f := get $fixed $g.name -}}
{{- if ne (index $f 0) $g.enabled -}}
{{- fail (printf "featureGates %s=%t is not possible in Manta: %s (only %t is accepted)" $g.name $g.enabled (index $f 1) (index $f 0)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* KubeRay's Configuration-only settings are read only from its file. */ -}}
{{- $cfg := $v.configuration | default dict -}}
{{- if not $cfg.enabled -}}
{{- range $k := list "defaultContainerEnvs" "defaultPodAnnotations" "defaultPodLabels" "headSidecarContainers" "workerSidecarContainers" -}}
{{- if get $cfg $k -}}
{{- fail (printf "value configuration.%s is set but configuration.enabled is false: it reaches the operator only in KubeRay's Configuration file; set configuration.enabled=true (KubeRay's chart would drop it)" $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $log := $v.logging | default dict -}}
{{- if and (or $log.baseDir $log.fileName) (not (and $log.baseDir $log.fileName)) -}}
{{- fail "values logging.baseDir and logging.fileName go together: the log file is baseDir/fileName" -}}
{{- end -}}
{{- if and $log.sizeLimit (not $log.baseDir) -}}
{{- fail "value logging.sizeLimit bounds the log file's volume: it needs logging.baseDir and logging.fileName" -}}
{{- end -}}
{{- toJson $s -}}
{{- end -}}

{{/* manta.operatorLabels are the labels of the operator's objects. */}}
{{- define "manta.operatorLabels" -}}
{{- include "manta.labels" . }}
app.kubernetes.io/component: {{ default "operator" .Values.componentOverride }}
{{- end -}}
