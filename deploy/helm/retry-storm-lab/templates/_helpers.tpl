{{/* Labels every object carries (equal to k8s/base; Helm's own labels are added on top). */}}
{{- define "lab.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/component: {{ .name }}
app.kubernetes.io/part-of: retry-storm-lab
{{- end -}}

{{- define "lab.helmLabels" -}}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lab.metricPrefix" -}}
{{- if eq . "edge-gateway" }}gateway{{ else if eq . "entity-service" }}entity_service{{ else }}{{ . }}{{ end -}}
{{- end -}}
