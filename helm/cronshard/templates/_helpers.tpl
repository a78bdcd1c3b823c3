{{/* Chart name, truncated for label use. */}}
{{- define "cronshard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: <release>-cronshard unless the release name already contains it. Kept short
enough that "<fullname>-scheduler-NN" stays a valid pod name and StatefulSet label. */}}
{{- define "cronshard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "cronshard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cronshard.labels" -}}
helm.sh/chart: {{ include "cronshard.chart" . }}
{{ include "cronshard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cronshard
{{- end }}

{{- define "cronshard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cronshard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Selector labels of one component: include "cronshard.componentSelector" (list . "scheduler") */}}
{{- define "cronshard.componentSelector" -}}
{{ include "cronshard.selectorLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "cronshard.componentLabels" -}}
{{ include "cronshard.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "cronshard.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "cronshard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cronshard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "cronshard.clusterName" -}}
{{- default (include "cronshard.fullname" .) .Values.config.clusterName }}
{{- end }}

{{- define "cronshard.secretName" -}}
{{- default (include "cronshard.fullname" .) .Values.existingSecret }}
{{- end }}

{{/* Fails the render with a clear message when a required setting is missing. Called from
every template that needs the settings, so `helm template` and `helm install` stop early. */}}
{{- define "cronshard.validate" -}}
{{- $v := .Values }}
{{- if not $v.existingSecret }}
{{- if not $v.secrets.databaseUrl }}
{{- fail "cronshard: secrets.databaseUrl is required (a Postgres DSN such as postgres://user:pass@host:5432/cronshard), or set existingSecret" }}
{{- end }}
{{- if not $v.secrets.redisUrls }}
{{- fail "cronshard: secrets.redisUrls is required (one or two Redis URLs such as [redis://redis:6379]), or set existingSecret" }}
{{- end }}
{{- if not $v.secrets.amqpUrl }}
{{- fail "cronshard: secrets.amqpUrl is required (a RabbitMQ URL such as amqp://user:pass@rabbitmq:5672/%2f), or set existingSecret" }}
{{- end }}
{{- if and $v.api.auth.enabled (not $v.secrets.apiTokens) }}
{{- fail "cronshard: api.auth.enabled is true but secrets.apiTokens is empty: set at least one token, or existingSecret (key API_TOKENS), or api.auth.enabled=false to run the API without auth" }}
{{- end }}
{{- /* Checked here rather than by a schema pattern, whose message would quote the key. */}}
{{- $kek := trim (default "" $v.secrets.secretsKek) }}
{{- if and $kek (not (regexMatch "^[A-Za-z0-9._-]{1,64}:[A-Za-z0-9+/]{43}=(,[A-Za-z0-9._-]{1,64}:[A-Za-z0-9+/]{43}=)*$" $kek)) }}
{{- fail "cronshard: secrets.secretsKek must be ID:BASE64KEY[,ID:BASE64KEY...] without spaces, each ID 1-64 letters, digits, '.', '_' or '-' and each key 32 bytes in standard base64, e.g. k1:$(openssl rand -base64 32) (the value given is not shown)" }}
{{- end }}
{{- end }}
{{- if lt (int $v.scheduler.replicas) 1 }}
{{- fail "cronshard: scheduler.replicas must be at least 1" }}
{{- end }}
{{- if and $v.worker.autoscaling.enabled (gt (int $v.worker.autoscaling.minReplicas) (int $v.worker.autoscaling.maxReplicas)) }}
{{- fail "cronshard: worker.autoscaling.minReplicas must not exceed maxReplicas" }}
{{- end }}
{{- if and $v.api.ingress.enabled (not $v.api.ingress.hosts) }}
{{- fail "cronshard: api.ingress.enabled is true but api.ingress.hosts is empty" }}
{{- end }}
{{- if lt (int $v.config.ledgerUnsuccessfulRetentionDays) (int $v.config.ledgerRetentionDays) }}
{{- fail (printf "cronshard: config.ledgerUnsuccessfulRetentionDays (%d) must be at least config.ledgerRetentionDays (%d): rows that did not succeed are kept at least as long as those that did" (int $v.config.ledgerUnsuccessfulRetentionDays) (int $v.config.ledgerRetentionDays)) }}
{{- end }}
{{- end }}

{{/* Environment every binary gets: the ConfigMap plus the connection settings from the Secret.
include "cronshard.commonEnv" (dict "ctx" . "api" false) */}}
{{- define "cronshard.commonEnv" -}}
{{- $ctx := .ctx }}
{{- $secret := include "cronshard.secretName" $ctx }}
{{- $keys := $ctx.Values.existingSecretKeys }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ ternary $keys.databaseUrl "DATABASE_URL" (ne $ctx.Values.existingSecret "") }}
{{- if not .migrate }}
- name: REDIS_URLS
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ ternary $keys.redisUrls "REDIS_URLS" (ne $ctx.Values.existingSecret "") }}
- name: AMQP_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ ternary $keys.amqpUrl "AMQP_URL" (ne $ctx.Values.existingSecret "") }}
{{- end }}
{{- end }}

{{/* SECRETS_KEK, the key-encryption keys of secret header values: the API, the workers and the
migrate Job get it, the schedulers do not. With secrets.secretsKek empty, or the key missing
from existingSecret (optional, so that a Secret made before this chart version still starts
the pods), a process starts without one and warns.
include "cronshard.secretsKekEnv" (dict "ctx" . "secret" NAME-OF-THE-CHART-SECRET) */}}
{{- define "cronshard.secretsKekEnv" -}}
{{- $ctx := .ctx }}
- name: SECRETS_KEK
  valueFrom:
    secretKeyRef:
      {{- if $ctx.Values.existingSecret }}
      name: {{ $ctx.Values.existingSecret }}
      key: {{ $ctx.Values.existingSecretKeys.secretsKek }}
      optional: true
      {{- else }}
      name: {{ .secret }}
      key: SECRETS_KEK
      {{- end }}
{{- end }}

{{- define "cronshard.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext }}
{{- end }}

{{- define "cronshard.securityContext" -}}
{{- toYaml .Values.securityContext }}
{{- end }}

{{/* Checksum of the settings, as a pod annotation, so that `helm upgrade` with new settings
rolls the pods. */}}
{{- define "cronshard.configChecksum" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- if not .Values.existingSecret }}
checksum/secret: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}
{{- end }}
