{{/* The CSI driver name: the same as csi.DriverName in the code (a test checks). */}}
{{- define "lakestream-csi.driverName" -}}csi.lakestream.io{{- end -}}
{{/* Where the kubelet finds the driver's socket. */}}
{{- define "lakestream-csi.pluginDir" -}}{{ .Values.kubeletDir }}/plugins/{{ include "lakestream-csi.driverName" . }}{{- end -}}
