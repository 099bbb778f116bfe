package csi

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/store"
)

// kubeAttrPrefix marks the attributes the kubelet adds (pod name,
// namespace, service account, ephemeral): they are not mount options.
const kubeAttrPrefix = "csi.storage.k8s.io/"

// consumerAttr is the driver's own attribute: volumes share a mount (and
// its one heartbeat, which gc and back-pressure see) only within one
// consumer, by default the volume id.
const consumerAttr = "consumer"

// driverAttrs are lakefs-mount options a volume may not set: the driver
// sets node-id and allow-other itself; the others are not per-volume
// (on the node's network two mounts would race for one metrics port).
var driverAttrs = []string{"node-id", "allow-other", "metrics-addr", "pprof", "debug"}

// volumeAttrs are the attributes a volume may set, sorted.
func volumeAttrs() []string {
	names := []string{consumerAttr}
	for _, op := range mount.OptionTable() {
		if !op.Hidden && !slices.Contains(driverAttrs, op.Name) {
			names = append(names, op.Name)
		}
	}
	sort.Strings(names)
	return names
}

// volumeOf turns a volume's id, attributes (lakefs-mount's long flags,
// parsed by mount.ParseAttributes with the command line's rules and
// messages) and secret into a shared mount's options.
func volumeOf(volID string, attrs, secrets map[string]string, nodeName string) (volume, error) {
	env, err := credentialEnv(secrets)
	if err != nil {
		return volume{}, err
	}
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad attribute is the same every time
	opts := map[string]string{}
	consumer := volID
	for _, k := range keys {
		v := attrs[k]
		switch {
		case strings.HasPrefix(k, kubeAttrPrefix):
		case k == consumerAttr:
			if v == "" {
				return volume{}, invalid("volume attribute %q is empty; name the job whose pods share one mount, or remove it", k)
			}
			consumer = v
		case slices.Contains(driverAttrs, k):
			return volume{}, invalid("volume attribute %q is set by the driver, not by a volume; remove it", k)
		case !slices.Contains(volumeAttrs(), k):
			return volume{}, invalid("unknown volume attribute %q; known: %s", k, strings.Join(volumeAttrs(), ", "))
		default:
			opts[k] = v
		}
	}
	o, err := mount.ParseAttributes(opts)
	if err != nil {
		return volume{}, invalid("volume attributes: %v", err)
	}
	if o.Store == "" {
		return volume{}, invalid("volume attribute \"store\" is missing; set it to the stream URL (file:///dir, s3://bucket/prefix, gs://bucket/prefix or az://container/prefix)")
	}
	if err := checkStore(o.Store); err != nil {
		return volume{}, err
	}
	// One process per view as gc and back-pressure see it, per consumer,
	// per node, per credentials; options outside the share key (cache
	// size, prefetch, wait...) come from the volume that started it.
	key := shareKey(append([]string{o.ShareKey(), nodeName, consumerAttr + "=" + consumer}, env...)...)
	o.NodeID = mountNodeID(nodeName, key)
	o.AllowOther = true
	return volume{Key: key, Options: o, Env: env}, nil
}

// checkStore refuses, before anything is started, a store URL that
// lakefs-mount would refuse or that carries credentials; errors never
// quote a credential. What needs the stream itself (ranks, view-ranks) or
// the S3 client's rules (query parameters) is left to lakefs-mount, whose
// usage errors come back as InvalidArgument too.
func checkStore(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return invalid("volume attribute \"store\" is not a URL; use file:///dir, s3://bucket/prefix, gs://bucket/prefix or az://container/prefix")
	}
	if hasUserinfo(u) {
		return invalid("volume attribute \"store\" carries credentials in its URL; remove them and put them in the volume's secret (nodePublishSecretRef: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS_JSON, AZURE_STORAGE_KEY)")
	}
	shown := store.Redact(raw)
	switch u.Scheme {
	case "s3", "gs", "az":
		return nil
	case "file":
		if u.Host != "" || !filepath.IsAbs(u.Path) {
			return invalid("volume attribute \"store\" %q: a file:// store is an absolute directory on the node, file:///dir", shown)
		}
		fi, err := os.Stat(u.Path)
		switch {
		case err != nil:
			return invalid("volume attribute \"store\" %q: directory %s: %v; give a stream's directory on the node", shown, u.Path, err)
		case !fi.IsDir():
			return invalid("volume attribute \"store\" %q: %s is not a directory; give a stream's directory on the node", shown, u.Path)
		}
		return nil
	case "mem":
		return invalid("volume attribute \"store\": a mem:// store lives inside one process (tests only); use file:///dir, s3://bucket/prefix, gs://bucket/prefix or az://container/prefix")
	default:
		return invalid("volume attribute \"store\" has unknown scheme %q; use file:///dir, s3://bucket/prefix, gs://bucket/prefix or az://container/prefix", u.Scheme)
	}
}

// hasUserinfo tells whether a URL, or a URL in one of its query
// parameters (endpoint=http://KEY:SECRET@host), carries user:secret@.
func hasUserinfo(u *url.URL) bool {
	if u.User != nil {
		return true
	}
	for _, vs := range u.Query() {
		for _, v := range vs {
			// By hand: a secret holding '/' makes no valid URL, and no
			// endpoint needs an '@'.
			if strings.Contains(v, "://") && strings.Contains(v, "@") {
				return true
			}
		}
	}
	return false
}
