{{/* Labels of every object of this release. */}}
{{- define "fastagent.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: fastagent
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{/* Selector labels of one component (worker, ingress). */}}
{{- define "fastagent.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Environment read from the Secret, key by key. */}}
{{- define "fastagent.secretEnv" -}}
{{- $optional := .root.Values.secrets.optional }}
{{- range .keys }}
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ $.root.Values.secrets.name }}
      key: {{ . }}
      {{- if has . $optional }}
      optional: true
      {{- end }}
{{- end }}
{{- end }}

{{/* The --agent arguments of the agents served beside the main one. */}}
{{- define "fastagent.agentArgs" -}}
{{- range .Values.agents }}
- --agent
- {{ printf "%s=/workspace/%s" .name .dir | quote }}
{{- end }}
{{- end }}

{{/* The container securityContext both components share. */}}
{{- define "fastagent.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The pod securityContext both components share. */}}
{{- define "fastagent.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Egress both components need: DNS, Temporal, store and feed, public HTTPS. */}}
{{- define "fastagent.egress" -}}
- to:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: kube-system
  ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
{{- if .Values.temporal.cloud }}
- to:
    - ipBlock:
        cidr: 0.0.0.0/0
        except: ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10"]
  ports:
    - protocol: TCP
      port: 7233
{{- else }}
- to:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: {{ .Values.temporal.kubernetesNamespace }}
  ports:
    - protocol: TCP
      port: 7233
{{- end }}
- to:
    - namespaceSelector: {}
  ports:
    - protocol: TCP
      port: 5432
    - protocol: TCP
      port: 4222
- to:
    - ipBlock:
        cidr: 0.0.0.0/0
        except: ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10"]
  ports:
    - protocol: TCP
      port: 443
{{- end }}
