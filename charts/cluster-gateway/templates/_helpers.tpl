{{/* The chart's name, or nameOverride. */}}
{{- define "cluster-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name of namespaced objects: the release name, joined with the chart's name unless it contains it. */}}
{{- define "cluster-gateway.fullname" -}}
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

{{/* Labels on every object. */}}
{{- define "cluster-gateway.labels" -}}
app.kubernetes.io/name: {{ include "cluster-gateway.name" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The pods' selector: the name alone, as config/ has it (one release per hub: the APIService is a singleton). */}}
{{- define "cluster-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cluster-gateway.name" . }}
{{- end }}

{{- define "cluster-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cluster-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "cluster-gateway.secretNamespace" -}}
{{- default .Release.Namespace .Values.secretNamespace }}
{{- end }}

{{- define "cluster-gateway.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "cluster-gateway.fullname" .)) .Values.tls.secretName }}
{{- end }}

{{/* The DNS names the hub's aggregator may verify the serving certificate for. */}}
{{- define "cluster-gateway.serviceDNSNames" -}}
{{- $svc := include "cluster-gateway.fullname" . }}
{{- list (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) (printf "%s.%s" $svc .Release.Namespace) $svc | toJson }}
{{- end }}

{{- define "cluster-gateway.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if eq $tag "latest" }}
{{- fail "image.tag must be a version, not latest: a rollout or a rollback must install a known build" }}
{{- end }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}

{{- /* credentialSourceNamespaces without secretNamespace (always read) and repeats, comma-separated. */}}
{{- define "cluster-gateway.credentialSourceNamespaces" -}}
{{- without (uniq .Values.credentialSourceNamespaces) (include "cluster-gateway.secretNamespace" .) | join "," }}
{{- end }}

{{- define "cluster-gateway.validate" -}}
{{- if not (has .Values.tls.mode (list "generate" "certManager" "existingSecret")) }}
{{- fail (printf "tls.mode must be generate, certManager or existingSecret, not %q" .Values.tls.mode) }}
{{- end }}
{{- if not (has .Values.podAntiAffinity (list "soft" "hard" "none")) }}
{{- fail (printf "podAntiAffinity must be soft, hard or none, not %q" .Values.podAntiAffinity) }}
{{- end }}
{{- range .Values.credentialSourceNamespaces }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" .) }}
{{- fail (printf "credentialSourceNamespaces: %q is not a namespace name" .) }}
{{- end }}
{{- end }}
{{- if and .Values.gateway.konnectivity.enabled (or (not (include "cluster-gateway.konnectivityAddresses" .)) (not .Values.gateway.konnectivity.secretName)) }}
{{- fail "gateway.konnectivity.enabled needs gateway.konnectivity.serverAddresses (or serverAddress, or konnectivityServer.enabled) and gateway.konnectivity.secretName" }}
{{- end }}
{{- if and .Values.konnectivityServer.enabled (or (not .Values.konnectivityServer.secretName) (lt (int .Values.konnectivityServer.replicas) 1)) }}
{{- fail "konnectivityServer.enabled needs konnectivityServer.secretName and at least 1 replica" }}
{{- end }}
{{- if and .Values.inventorySync.clusterProfile (not .Values.inventorySync.providers) (not (regexMatch "(?m)^--credential-providers-file(=|$)" (join "\n" .Values.gateway.extraArgs))) }}
{{- fail "inventorySync.clusterProfile needs credential providers: pass --credential-providers-file in gateway.extraArgs (every provider it configures may then be named), or list some in inventorySync.providers" }}
{{- end }}
{{- end }}

{{/* The proxy-servers' StatefulSet and headless Service. */}}
{{- define "cluster-gateway.konnectivityServerName" -}}
{{- printf "%s-konnectivity" (include "cluster-gateway.fullname" .) | trunc 52 | trimSuffix "-" }}
{{- end }}

{{- define "cluster-gateway.konnectivityServerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "cluster-gateway.name" . }}-konnectivity-server
{{- end }}

{{/* The gateway's proxy-servers, comma-separated: those given, else each pod of konnectivityServer by its stable name. */}}
{{- define "cluster-gateway.konnectivityAddresses" -}}
{{- $addrs := .Values.gateway.konnectivity.serverAddresses }}
{{- with .Values.gateway.konnectivity.serverAddress }}{{ $addrs = append $addrs . }}{{ end }}
{{- if and (not $addrs) .Values.konnectivityServer.enabled }}
{{- $sts := include "cluster-gateway.konnectivityServerName" . }}
{{- range $i := until (int .Values.konnectivityServer.replicas) }}
{{- $addrs = append $addrs (printf "%s-%d.%s.%s.svc:8090" $sts $i $sts $.Release.Namespace) }}
{{- end }}
{{- end }}
{{- uniq $addrs | join "," }}
{{- end }}
