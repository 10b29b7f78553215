{{/*
Object name: the values' name (what `orch compile` writes) or the release name. At most 40 characters,
because LeaderWorkerSet builds pod and StatefulSet names from it.
*/}}
{{- define "orch.name" -}}
{{- $name := .Values.name | default .Release.Name -}}
{{- if gt (len $name) 40 -}}
{{- fail (printf "name %q is longer than 40 characters; set a shorter .Values.name" $name) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/* Labels selectors match on: stable across layouts, so a new layout updates the app in place. */}}
{{- define "orch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "orch.name" . | quote }}
app.kubernetes.io/component: engine
{{- end -}}

{{- define "orch.labels" -}}
{{- $base := dict
  "app.kubernetes.io/name" (include "orch.name" .)
  "app.kubernetes.io/component" "engine"
  "app.kubernetes.io/managed-by" "orch"
  "orch.dev/engine" .Values.engine
  "orch.dev/layout" .Values.layout -}}
{{- toYaml (mergeOverwrite $base (deepCopy .Values.extraLabels)) -}}
{{- end -}}

{{- define "orch.metadata" -}}
name: {{ include "orch.name" . | quote }}
namespace: {{ .Values.namespace | default .Release.Namespace | quote }}
labels:
  {{- include "orch.labels" . | nindent 2 }}
{{- with .Values.specHash }}
annotations:
  orch.dev/spec-hash: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* Pod template metadata; call with (dict "root" $ "role" "leader"). */}}
{{- define "orch.podMetadata" -}}
labels:
  {{- include "orch.selectorLabels" .root | nindent 2 }}
  orch.dev/layout: {{ .root.Values.layout | quote }}
  orch.dev/role: {{ .role }}
{{- if and .root.Values.podAnnotations (eq .role "leader") }}
annotations:
  {{- toYaml .root.Values.podAnnotations | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
Pod spec; call with (dict "root" $ "cmd" .Values.leader "serve" true). Only a serving pod (the leader)
gets the HTTP port and the probes: worker ranks of a multi-node replica have no endpoint.
*/}}
{{- define "orch.podSpec" -}}
{{- $v := .root.Values -}}
{{- $selector := deepCopy $v.nodeSelector -}}
{{- if $v.gpuProduct }}{{ $_ := set $selector "nvidia.com/gpu.product" $v.gpuProduct }}{{ end -}}
# Service links would put one env var per Service into the pod; engines misread some (VLLM_PORT).
enableServiceLinks: false
containers:
  - name: engine
    image: {{ $v.image | quote }}
    imagePullPolicy: {{ $v.imagePullPolicy }}
    command:
      {{- toYaml .cmd.command | nindent 6 }}
    {{- if or $v.hfToken.secretName .cmd.env $v.extraEnv }}
    env:
      {{- if $v.hfToken.secretName }}
      # Optional: public models need no token, and a missing Secret must not keep the pod from starting.
      - name: HF_TOKEN
        valueFrom:
          secretKeyRef:
            name: {{ $v.hfToken.secretName | quote }}
            key: {{ $v.hfToken.key | quote }}
            optional: true
      {{- end }}
      {{- with .cmd.env }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
      {{- with $v.extraEnv }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- end }}
    resources:
      limits:
        {{- toYaml (mergeOverwrite (deepCopy $v.resources.extraLimits) (dict "nvidia.com/gpu" (int $v.gpusPerPod))) | nindent 8 }}
      {{- with $v.resources.requests }}
      requests:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    {{- with $v.securityContext }}
    securityContext:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    volumeMounts:
      - name: dshm
        mountPath: /dev/shm
      {{- if $v.modelCache.claimName }}
      - name: model-cache
        mountPath: {{ $v.modelCache.mountPath | quote }}
      {{- end }}
      {{- with $v.extraVolumeMounts }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- if .serve }}
    ports:
      - name: http
        containerPort: {{ int $v.containerPort }}
        protocol: TCP
    # The startup probe outwaits a large model's download and load; readiness stays strict after it.
    startupProbe:
      httpGet:
        path: {{ $v.healthPath | quote }}
        port: http
      periodSeconds: {{ int $v.probes.periodSeconds }}
      timeoutSeconds: {{ int $v.probes.timeoutSeconds }}
      failureThreshold: {{ int $v.probes.startupFailureThreshold }}
    readinessProbe:
      httpGet:
        path: {{ $v.healthPath | quote }}
        port: http
      periodSeconds: {{ int $v.probes.periodSeconds }}
      timeoutSeconds: {{ int $v.probes.timeoutSeconds }}
      failureThreshold: {{ int $v.probes.readinessFailureThreshold }}
    {{- end }}
volumes:
  # NCCL and the engines' shared-memory transports need more than the default 64 MiB /dev/shm.
  - name: dshm
    emptyDir:
      medium: Memory
      sizeLimit: {{ $v.shmSize | quote }}
  {{- if $v.modelCache.claimName }}
  - name: model-cache
    persistentVolumeClaim:
      claimName: {{ $v.modelCache.claimName | quote }}
  {{- end }}
  {{- with $v.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $selector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.serviceAccountName }}
serviceAccountName: {{ . | quote }}
{{- end }}
{{- with $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
