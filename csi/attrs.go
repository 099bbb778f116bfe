package csi

import (
	"slices"
	"strings"

	"github.com/lakestream/lakestream/mount"
)

// kubeAttrPrefix marks the attributes the kubelet adds (pod name,
// namespace, service account, ephemeral): they are not mount options.
const kubeAttrPrefix = "csi.storage.k8s.io/"

// driverAttrs are lakefs-mount options a volume may not set: the driver
// sets node-id and allow-other itself; the others are not per-volume
// (on the node's network two mounts would race for one metrics port).
var driverAttrs = []string{"node-id", "allow-other", "metrics-addr", "pprof", "debug"}

// volumeOf turns a volume's attributes (lakefs-mount's long flags, parsed
// by mount.ParseAttributes with the command line's rules and messages)
// and secret into a shared mount's options.
func volumeOf(attrs, secrets map[string]string, nodeName string) (volume, error) {
	env, err := credentialEnv(secrets)
	if err != nil {
		return volume{}, err
	}
	opts := map[string]string{}
	for k, v := range attrs {
		if strings.HasPrefix(k, kubeAttrPrefix) {
			continue
		}
		if slices.Contains(driverAttrs, k) {
			return volume{}, invalid("volume attribute %q is set by the driver, not by a volume; remove it", k)
		}
		opts[k] = v
	}
	if opts["store"] == "" {
		return volume{}, invalid("volume attribute \"store\" is missing; set it to the stream URL (file:///dir or s3://bucket/prefix?endpoint=...)")
	}
	o, err := mount.ParseAttributes(opts)
	if err != nil {
		return volume{}, invalid("volume attributes: %v", err)
	}
	// One process per view as gc and back-pressure see it, per node, per
	// credentials; options outside the share key (cache size, prefetch,
	// wait...) come from the volume that started it.
	key := shareKey(append([]string{o.ShareKey(), nodeName}, env...)...)
	o.NodeID = mountNodeID(nodeName, key)
	o.AllowOther = true
	return volume{Key: key, Options: o, Env: env}, nil
}
