{{/*
The objects of one unit: a layout's engine pods (Deployment or LeaderWorkerSet) and its Service, or the
router of a prefill/decode pair. Each takes a root-like dict (Values, Release, Capabilities), so the
top-level templates render either the values themselves (one layout) or each of `.Values.units` (a
prefill/decode pair: its prefill pool, its decode pool and its router, as `orch compile` writes them).
*/}}

{{- define "orch.deployment" -}}
{{- /* Single-node replicas: one pod per replica. */ -}}
{{- if le (int .Values.nodesPerReplica) 1 }}
apiVersion: apps/v1
kind: Deployment
metadata:
  {{- include "orch.metadata" . | nindent 2 }}
spec:
  replicas: {{ int .Values.replicas }}
  # The default rollout adds a pod before removing one; on a full GPU pool it never schedules.
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 0
      maxUnavailable: 1
  selector:
    matchLabels:
      {{- include "orch.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      {{- include "orch.podMetadata" (dict "root" . "role" "leader") | nindent 6 }}
    spec:
      {{- include "orch.podSpec" (dict "root" . "cmd" .Values.leader "serve" true) | nindent 6 }}
{{- end }}
{{- end -}}

{{- define "orch.leaderworkerset" -}}
{{- /* Multi-node replicas: one LeaderWorkerSet group per replica, pod 0 of a group is the leader. */ -}}
{{- if gt (int .Values.nodesPerReplica) 1 }}
{{- if not (.Capabilities.APIVersions.Has "leaderworkerset.x-k8s.io/v1") }}
{{- fail "layout spans nodes and needs the LeaderWorkerSet API (leaderworkerset.x-k8s.io/v1): install the LWS controller, or pass --api-versions leaderworkerset.x-k8s.io/v1 to helm template" }}
{{- end }}
{{- if not .Values.worker.command }}
{{- fail "nodesPerReplica > 1 needs worker.command (the command of the non-leader pods)" }}
{{- end }}
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  {{- include "orch.metadata" . | nindent 2 }}
spec:
  replicas: {{ int .Values.replicas }}
  # Workers need only the leader's address; the leader cannot become ready before they join.
  startupPolicy: LeaderCreated
  leaderWorkerTemplate:
    size: {{ int .Values.nodesPerReplica }}
    # One lost rank breaks the whole group's collective: restart the group together.
    restartPolicy: RecreateGroupOnPodRestart
    leaderTemplate:
      metadata:
        {{- include "orch.podMetadata" (dict "root" . "role" "leader") | nindent 8 }}
      spec:
        {{- include "orch.podSpec" (dict "root" . "cmd" .Values.leader "serve" true) | nindent 8 }}
    workerTemplate:
      metadata:
        {{- include "orch.podMetadata" (dict "root" . "role" "worker") | nindent 8 }}
      spec:
        {{- include "orch.podSpec" (dict "root" . "cmd" .Values.worker "serve" false) | nindent 8 }}
{{- end }}
{{- end -}}

{{- define "orch.service" -}}
{{- /* Leader pods only: workers of multi-node replicas do not serve HTTP. */ -}}
apiVersion: v1
kind: Service
metadata:
  {{- include "orch.metadata" . | nindent 2 }}
spec:
  type: {{ .Values.service.type }}
  selector:
    {{- include "orch.selectorLabels" . | nindent 4 }}
    orch.dev/role: leader
  ports:
    - name: http
      port: {{ int .Values.service.port }}
      targetPort: http
      protocol: TCP
{{- end -}}

{{/* A router that discovers its pool pods through the API (SGLang's) reads pods: podReader. */}}
{{- define "orch.rbac" -}}
{{- if .Values.podReader }}
apiVersion: v1
kind: ServiceAccount
metadata:
  {{- include "orch.metadata" . | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  {{- include "orch.metadata" . | nindent 2 }}
rules:
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  {{- include "orch.metadata" . | nindent 2 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ include "orch.name" . | quote }}
subjects:
  - kind: ServiceAccount
    name: {{ include "orch.name" . | quote }}
    namespace: {{ .Values.namespace | default .Release.Namespace | quote }}
{{- end }}
{{- end -}}
