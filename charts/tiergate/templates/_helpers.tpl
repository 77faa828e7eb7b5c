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
CEL: can the pod spec at path `.spec` reach GPU nodes by any route tiergate confines (docs/admission.md, "Tenant
boundary")? A GPU-like resource (requests or limits of any container, init container or the pod-level
`resources`), a DRA `resourceClaims` entry, a nodeSelector, node affinity, a nodeName, a toleration other than the
API server's default `node.kubernetes.io/*` ones (a GPU taint, or an empty key that tolerates everything), or a
pod `priorityClassName` (Kueue's workload priority when no priority-class label is set). The chart cannot know
the policy's GPU-class label keys, so any node selection is sent; a CPU pod with none of these is never sent.
Every optional field is guarded with has(), so the expression never errors (an error with failurePolicy Fail
would reject the request).
*/}}
{{- define "tiergate.celGpuPodSpec" -}}
{{- $prefixes := list }}
{{- range .root.Values.webhook.matchConditions.gpuResourcePrefixes }}
{{- $prefixes = append $prefixes (printf "r.startsWith('%s')" .) }}
{{- end }}
{{- $isGpu := join " || " $prefixes }}
{{- $container := printf "has(c.resources) && ((has(c.resources.requests) && c.resources.requests.exists(r, %s)) || (has(c.resources.limits) && c.resources.limits.exists(r, %s)))" $isGpu $isGpu }}
{{- $resources := printf "(SPEC.containers.exists(c, %s) || (has(SPEC.initContainers) && SPEC.initContainers.exists(c, %s)) || (has(SPEC.resources) && ((has(SPEC.resources.requests) && SPEC.resources.requests.exists(r, %s)) || (has(SPEC.resources.limits) && SPEC.resources.limits.exists(r, %s)))))" $container $container $isGpu $isGpu }}
{{- $routes := "(has(SPEC.resourceClaims) && size(SPEC.resourceClaims) > 0) || has(SPEC.nodeSelector) || (has(SPEC.affinity) && has(SPEC.affinity.nodeAffinity)) || (has(SPEC.nodeName) && SPEC.nodeName != '') || (has(SPEC.tolerations) && SPEC.tolerations.exists(t, !has(t.key) || !t.key.startsWith('node.kubernetes.io/'))) || has(SPEC.priorityClassName)" }}
{{- printf "(%s || %s)" $resources $routes | replace "SPEC" .spec }}
{{- end }}

{{/* CEL: does the object at `.meta` carry a Kueue priority-class label (held to the tier's ceiling)? */}}
{{- define "tiergate.celPriorityLabel" -}}
{{- printf "(has(%s.labels) && 'kueue.x-k8s.io/priority-class' in %s.labels)" .meta .meta }}
{{- end }}

{{/*
CEL: has() guards for every field on the dotted path `.path` after its root variable (segments with an index, such
as `m[k]`, need none), so the expression that follows never selects a missing field.
*/}}
{{- define "tiergate.celGuards" -}}
{{- $segments := splitList "." .path }}
{{- $guards := list }}
{{- range $index, $segment := $segments }}
{{- if and (gt $index 0) (not (contains "[" $segment)) }}
{{- $guards = append $guards (printf "has(%s)" (join "." (slice $segments 0 (add $index 1)))) }}
{{- end }}
{{- end }}
{{- join " && " $guards }}
{{- end }}

{{/* CEL: the pod spec at the dotted path `.spec` exists (guarded) and requests a GPU-like resource. */}}
{{- define "tiergate.celGuardedGpu" -}}
{{- printf "(%s && %s)" (include "tiergate.celGuards" (dict "path" .spec)) (include "tiergate.celGpuPodSpec" .) }}
{{- end }}

{{/* CEL: the ResourceRequirements at `.requirements` (already guarded) requests or limits a GPU-like resource. */}}
{{- define "tiergate.celGpuRequirements" -}}
{{- $prefixes := list }}
{{- range .root.Values.webhook.matchConditions.gpuResourcePrefixes }}
{{- $prefixes = append $prefixes (printf "r.startsWith('%s')" .) }}
{{- end }}
{{- $isGpu := join " || " $prefixes }}
{{- printf "((has(%s.requests) && %s.requests.exists(r, %s)) || (has(%s.limits) && %s.limits.exists(r, %s)))" .requirements .requirements $isGpu .requirements .requirements $isGpu }}
{{- end }}

{{/*
CEL for kinds.tiergate.io: per resource, does any pod template request a GPU-like resource? AppWrapper (templates of
any kind) and SparkApplication (GPUs as driver/executor `gpu` fields or templates) are always sent.
*/}}
{{- define "tiergate.celKindsGpu" -}}
{{- $root := .root }}
{{- $gpu := dict }}
{{- $_ := set $gpu "cronjobs" (include "tiergate.celGuardedGpu" (dict "root" $root "spec" "object.spec.jobTemplate.spec.template.spec")) }}
{{- range $resource, $cluster := dict "rayjobs" "object.spec.rayClusterSpec" "rayclusters" "object.spec" "rayservices" "object.spec.rayClusterConfig" }}
{{- $head := include "tiergate.celGuardedGpu" (dict "root" $root "spec" (printf "%s.headGroupSpec.template.spec" $cluster)) }}
{{- $workers := printf "(%s && %s.workerGroupSpecs.exists(g, %s))" (include "tiergate.celGuards" (dict "path" (printf "%s.workerGroupSpecs" $cluster))) $cluster (include "tiergate.celGuardedGpu" (dict "root" $root "spec" "g.template.spec")) }}
{{- $_ := set $gpu $resource (printf "(%s || %s)" $head $workers) }}
{{- end }}
{{- /* Each Kubeflow kind only its own replica map: the API server prunes another kind's map (unknown to the
       kind's structural schema) before admission, and one expression for all six maps per kind went past the
       API server's 100,000-character limit on a matchCondition. */ -}}
{{- range $resource, $field := dict "pytorchjobs" "pytorchReplicaSpecs" "tfjobs" "tfReplicaSpecs" "xgboostjobs" "xgbReplicaSpecs" "paddlejobs" "paddleReplicaSpecs" "jaxjobs" "jaxReplicaSpecs" "mpijobs" "mpiReplicaSpecs" }}
{{- $map := printf "object.spec.%s" $field }}
{{- $_ := set $gpu $resource (printf "(%s && %s.exists(k, %s))" (include "tiergate.celGuards" (dict "path" $map)) $map (include "tiergate.celGuardedGpu" (dict "root" $root "spec" (printf "%s[k].template.spec" $map)))) }}
{{- end }}
{{- $perNode := include "tiergate.celGpuRequirements" (dict "root" $root "requirements" "object.spec.trainer.resourcesPerNode") }}
{{- $_ := set $gpu "trainjobs" (printf "((%s && %s) || %s)" (include "tiergate.celGuards" (dict "path" "object.spec.trainer.resourcesPerNode")) $perNode (include "tiergate.celGuards" (dict "path" "object.spec.runtimePatches"))) }}
{{- $lws := list }}
{{- range list "leaderTemplate" "workerTemplate" }}
{{- $lws = append $lws (include "tiergate.celGuardedGpu" (dict "root" $root "spec" (printf "object.spec.leaderWorkerTemplate.%s.spec" .))) }}
{{- end }}
{{- $_ := set $gpu "leaderworkersets" (printf "(%s)" (join " || " $lws)) }}
{{- $_ := set $gpu "appwrappers" "true" }}
{{- $_ := set $gpu "sparkapplications" "true" }}
{{- $cases := list }}
{{- range $resource := keys $gpu | sortAlpha }}
{{- $cases = append $cases (printf "(request.resource.resource == '%s' && %s)" $resource (get $gpu $resource)) }}
{{- end }}
{{- join " || " $cases }}
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
