{{/* Names, labels and the CEL match conditions shared by every template. */}}

{{- define "tiergate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tiergate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tiergate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tiergate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tiergate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tiergate.labels" -}}
helm.sh/chart: {{ include "tiergate.chart" . }}
{{ include "tiergate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tiergate
{{- end }}

{{- define "tiergate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tiergate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tiergate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "tiergate.serviceName" -}}
{{- printf "%s-webhook" (include "tiergate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tiergate.certSecretName" -}}
{{- default (printf "%s-webhook-tls" (include "tiergate.fullname" .)) .Values.certificates.secretName }}
{{- end }}

{{- define "tiergate.leaseName" -}}
{{- default (printf "%s-leader" (include "tiergate.fullname" .)) .Values.leaseName }}
{{- end }}

{{/*
The MutatingWebhookConfiguration name. The API server calls mutating webhook configurations in name order, so
tiergate's must sort before Kueue's ("kueue-mutating-webhook-configuration"): Kueue's webhook then sees the
queue-name label tiergate set. reinvocationPolicy IfNeeded re-runs tiergate if a later webhook changes the object.
*/}}
{{- define "tiergate.webhookConfigurationName" -}}
{{- $name := default (printf "00-%s" (include "tiergate.fullname" .)) .Values.webhook.configurationName }}
{{- if not (lt $name "kueue-mutating-webhook-configuration") }}
{{- fail (printf "webhook.configurationName %q must sort before \"kueue-mutating-webhook-configuration\" (the API server calls mutating webhooks in name order and Kueue must see tiergate's queue-name label); e.g. use \"00-tiergate\"" $name) }}
{{- end }}
{{- $name }}
{{- end }}

{{- define "tiergate.selfManagedCerts" -}}
{{- if eq .Values.certificates.mode "self-managed" }}true{{ end }}
{{- end }}

{{/*
CEL: does the pod spec at path `.spec` request a GPU-like resource (requests or limits, any container or init
container)? Every optional field is guarded with has(), so the expression never errors (an error with
failurePolicy Fail would reject the request).
*/}}
{{- define "tiergate.celGpuPodSpec" -}}
{{- $prefixes := list }}
{{- range .root.Values.webhook.matchConditions.gpuResourcePrefixes }}
{{- $prefixes = append $prefixes (printf "r.startsWith('%s')" .) }}
{{- end }}
{{- $isGpu := join " || " $prefixes }}
{{- $container := printf "has(c.resources) && ((has(c.resources.requests) && c.resources.requests.exists(r, %s)) || (has(c.resources.limits) && c.resources.limits.exists(r, %s)))" $isGpu $isGpu }}
{{- printf "(%s.containers.exists(c, %s) || (has(%s.initContainers) && %s.initContainers.exists(c, %s)))" .spec $container .spec .spec $container }}
{{- end }}

{{/* CEL: do the annotations at `.meta` (a metadata path) declare placement or GPU pinning? */}}
{{- define "tiergate.celPlacementMeta" -}}
{{- $keys := list }}
{{- range .root.Values.webhook.matchConditions.placementAnnotations }}
{{- $keys = append $keys (printf "'%s'" .) }}
{{- end }}
{{- $checks := list (printf "k in [%s]" (join ", " $keys)) }}
{{- range .root.Values.webhook.matchConditions.annotationPrefixes }}
{{- $checks = append $checks (printf "k.startsWith('%s')" .) }}
{{- end }}
{{- printf "(has(%s.annotations) && %s.annotations.exists(k, %s))" .meta .meta (join " || " $checks) }}
{{- end }}

{{- define "tiergate.matchConditionsSupported" -}}
{{- if and .Values.webhook.matchConditions.enabled (semverCompare ">=1.28.0-0" .Capabilities.KubeVersion.Version) }}true{{ end }}
{{- end }}

{{- /*
The webhook's budget of request bytes in flight (`--max-inflight-bytes`): webhook.maxInflightBytes when set, else
derived from resources.limits.memory as (limit - 96Mi baseline) / 5 (the measured memory per charged byte, see
docs/operations.md "Memory under load"), so that a flood of large reviews gets 429s, never an OOM kill.
*/ -}}
{{- define "tiergate.maxInflightBytes" -}}
{{- $limit := toString (dig "limits" "memory" "" .Values.resources) -}}
{{- if .Values.webhook.maxInflightBytes -}}
{{- .Values.webhook.maxInflightBytes -}}
{{- else if not $limit -}}
32Mi
{{- else -}}
{{- $mi := 0 -}}
{{- if hasSuffix "Gi" $limit }}{{ $mi = mul (trimSuffix "Gi" $limit | atoi) 1024 }}
{{- else if hasSuffix "Mi" $limit }}{{ $mi = trimSuffix "Mi" $limit | atoi }}
{{- else if regexMatch "^[0-9]+$" $limit }}{{ $mi = div ($limit | atoi) 1048576 }}
{{- else }}{{ fail (printf "resources.limits.memory %q: write it in Mi or Gi (e.g. 256Mi), or set webhook.maxInflightBytes" $limit) }}
{{- end -}}
{{- $budget := div (sub $mi 96) 5 -}}
{{- if lt $budget 5 }}{{ fail (printf "resources.limits.memory %s leaves no room for one 4 MiB review after the 96Mi baseline: use at least 121Mi, or set webhook.maxInflightBytes" $limit) }}{{ end -}}
{{- printf "%dMi" $budget -}}
{{- end -}}
{{- end }}
