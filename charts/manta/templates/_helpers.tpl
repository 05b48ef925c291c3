{{/* The prefix of every object's name: the release name when it already says manta, else <release>-manta. */}}
{{- define "manta.fullname" -}}
{{- if contains "manta" .Release.Name -}}
{{- .Release.Name | trunc 48 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-manta" .Release.Name | trunc 48 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "manta.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Labels on every object; selectorLabels with a component are what Deployments and Services select on. */}}
{{- define "manta.labels" -}}
app.kubernetes.io/name: manta
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: manta
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "manta.selectorLabels" -}}
app.kubernetes.io/name: manta
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
