package csi

import (
	"slices"
	"strings"
)

// kubeAttrPrefix marks the attributes the kubelet adds (pod name,
// namespace, service account, ephemeral): they are not mount options.
const kubeAttrPrefix = "csi.storage.k8s.io/"

// driverAttrs are lakefs-mount options the driver sets itself.
var driverAttrs = []string{"node-id", "allow-other", "abort", "debug", "metrics-addr", "pprof"}

// volume turns attributes into lakefs-mount options: each attribute is
// the long flag of the same name, so lakefs-mount validates it with the
// command line's rules and messages (exit 2 becomes InvalidArgument).
func (m execMounter) volume(attrs, secrets map[string]string, nodeName string) (volume, error) {
	env, err := credentialEnv(secrets)
	if err != nil {
		return volume{}, err
	}
	var names []string
	for k := range attrs {
		if !strings.HasPrefix(k, kubeAttrPrefix) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	parts := []string{nodeName}
	var args []string
	for _, k := range names {
		if slices.Contains(driverAttrs, k) {
			return volume{}, invalid("volume attribute %q is set by the driver; remove it", k)
		}
		if k == "" || strings.Trim(k, "abcdefghijklmnopqrstuvwxyz-") != "" {
			return volume{}, invalid("volume attribute %q is not a lakefs-mount option; see lakefs-mount --help for the names", k)
		}
		args = append(args, "--"+k+"="+attrs[k])
		parts = append(parts, k, attrs[k])
	}
	if _, ok := attrs["store"]; !ok {
		return volume{}, invalid("volume attribute \"store\" is missing; set it to the stream URL (file:///dir or s3://bucket/prefix?endpoint=...)")
	}
	key := shareKey(append(parts, env...)...)
	args = append(args, "--allow-other", "--node-id="+mountNodeID(nodeName, key))
	return volume{Key: key, Args: args, Env: env}, nil
}
