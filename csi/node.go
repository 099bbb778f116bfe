package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lakestream/lakestream/mount"
)

// NodeGetInfo returns the Kubernetes node name; no topology, no volume
// limit (a node takes as many streams as its memory allows).
func (d *driver) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: d.nodeID}, nil
}

// NodeGetCapabilities: publish and unpublish only (no staging: a shared
// mount is per options, not per volume id).
func (d *driver) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return &csipb.NodeGetCapabilitiesResponse{}, nil
}

// NodePublishVolume bind-mounts the volume's shared mount, read-only, at
// the target, starting the shared mount if this is its first user. It is
// idempotent: a target already published for the same options succeeds.
// The target is recorded before it is bound and dropped again if the bind
// fails, so a crash leaves no bind the registry does not name, and a
// failed publish leaves no mount running for nobody.
func (d *driver) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	target, err := checkPublish(req)
	if err != nil {
		return nil, err
	}
	v, err := volumeOf(req.GetVolumeId(), req.GetVolumeContext(), req.GetSecrets(), d.nodeID)
	if err != nil {
		return nil, err
	}
	unlock := d.reg.lock(v.Key)
	defer unlock()
	k, recorded := d.reg.keyOf(target)
	if recorded && k != v.Key {
		return nil, status.Errorf(codes.AlreadyExists, "target %s is published for another volume's options; unpublish it first", target)
	}
	if err := checkTarget(ctx, target, recorded); err != nil {
		return nil, err
	}
	m, err := d.serving(ctx, v)
	if err != nil {
		return nil, err
	}
	if slices.Contains(m.Targets, target) {
		if s, err := mount.StateOf(ctx, target); err == nil && s == mount.Live {
			return &csipb.NodePublishVolumeResponse{}, nil
		}
	} else {
		m.Targets = append(m.Targets, target)
	}
	if m.Volumes == nil {
		m.Volumes = map[string]string{}
	}
	m.Volumes[target] = req.GetVolumeId()
	if err := d.reg.put(m); err != nil {
		return nil, d.failPublish(ctx, v.Key, target, status.Error(codes.Internal, err.Error()))
	}
	// A dead bind of an earlier process (ENOTCONN) refuses mkdir and bind.
	if err := mount.Unmount(target); err != nil {
		return nil, d.failPublish(ctx, v.Key, target, status.Error(codes.Internal, err.Error()))
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, d.failPublish(ctx, v.Key, target, status.Errorf(codes.Internal, "creating target %s: %v", target, err))
	}
	if err := bindReadOnly(m.Dir, target); err != nil {
		return nil, d.failPublish(ctx, v.Key, target, status.Error(codes.Internal, err.Error()))
	}
	d.log.Info("published", "volume", req.GetVolumeId(), "target", target, "mount", m.Key, "users", len(m.Targets))
	return &csipb.NodePublishVolumeResponse{}, nil
}

// failPublish drops target from key's mount, stopping the mount if it
// has no other target, and returns err. REQUIRES key's lock.
func (d *driver) failPublish(ctx context.Context, key, target string, err error) error {
	_ = mount.Unmount(target)
	if rerr := d.release(ctx, key, target); rerr != nil {
		d.log.Warn("cleaning up after a failed publish", "mount", key, "target", target, "err", rerr)
	}
	return err
}

// checkTarget refuses, before anything is started, a target that cannot
// be published: a symlink (the bind would land on its destination and
// unpublish would remove only the link), a file, or a mount this driver
// did not make. A dead bind is fine: it is unmounted before binding.
func checkTarget(ctx context.Context, target string, recorded bool) error {
	s, err := mount.StateOf(ctx, target)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	switch s {
	case mount.Dead:
		return nil
	case mount.Live, mount.Hung:
		if recorded {
			return nil // ours: idempotent, or rebound once its mount restarts
		}
		return status.Errorf(codes.FailedPrecondition, "target %s already has a filesystem mounted (%s) that this driver did not publish; unmount it or choose another path", target, s)
	}
	fi, err := os.Lstat(target)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return status.Errorf(codes.Internal, "target %s: %v", target, err)
	case fi.Mode()&os.ModeSymlink != 0:
		return invalid("target path %s is a symlink; give the directory itself", target)
	case !fi.IsDir():
		return invalid("target path %s is not a directory; a stream is mounted on a directory", target)
	}
	return nil
}

// readerModes are the access modes the driver honours: a stream's view is
// read-only.
var readerModes = []csipb.VolumeCapability_AccessMode_Mode{
	csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
	csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
}

// mountFlags are the mount flags the driver honours: the bind is always
// read-only, nosuid and nodev.
var mountFlags = []string{"ro", "nosuid", "nodev"}

// checkPublish validates a publish request and returns its target.
func checkPublish(req *csipb.NodePublishVolumeRequest) (string, error) {
	if req.GetVolumeId() == "" {
		return "", invalid("no volume id in the request")
	}
	if req.GetTargetPath() == "" {
		return "", invalid("no target path in the request")
	}
	c := req.GetVolumeCapability()
	if c == nil {
		return "", invalid("no volume capability in the request")
	}
	if c.GetBlock() != nil {
		return "", invalid("a stream is a filesystem; use volumeMode: Filesystem, not Block")
	}
	if !filepath.IsAbs(req.GetTargetPath()) {
		return "", invalid("target path %q is not absolute", req.GetTargetPath())
	}
	if !req.GetReadonly() {
		return "", invalid("a stream's volume is read-only; set readOnly: true on the pod's volume (or the PersistentVolume's csi.readOnly)")
	}
	// The kubelet sends SINGLE_NODE_WRITER for every inline volume, whatever
	// its readOnly; a PersistentVolume states its modes.
	mode := c.GetAccessMode().GetMode()
	inline := req.GetVolumeContext()[kubeAttrPrefix+"ephemeral"] == "true"
	if !slices.Contains(readerModes, mode) && (!inline || mode != csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER) {
		return "", invalid("access mode %s cannot be honoured: a stream's volume is read-only; use accessModes: [ReadOnlyMany]", mode)
	}
	for _, f := range c.GetMount().GetMountFlags() {
		if !slices.Contains(mountFlags, f) {
			return "", invalid("mount flag %q is not supported; the bind is always %s", f, strings.Join(mountFlags, ","))
		}
	}
	return filepath.Clean(req.GetTargetPath()), nil
}

// serving returns v's shared mount with a live process, starting one if
// there is none or the recorded one died or hangs (its old targets stay
// dead until published again or unpublished: a bind of a dead FUSE
// connection cannot be revived).
// REQUIRES v.Key's lock.
func (d *driver) serving(ctx context.Context, v volume) (sharedMount, error) {
	m, ok := d.reg.get(v.Key)
	if ok && m.Proc.alive() {
		s, err := mount.StateOf(ctx, m.Dir)
		if err == nil && s == mount.Live {
			return m, nil
		}
		d.log.Warn("restarting a shared mount", "mount", v.Key, "pid", m.Proc.PID, "state", s)
	}
	if !ok {
		m = sharedMount{Key: v.Key, Dir: filepath.Join(d.stateDir, "mounts", v.Key)}
	}
	if err := d.mounter.stop(ctx, m.Proc, m.Dir); err != nil {
		return sharedMount{}, status.Error(codes.Internal, err.Error())
	}
	m.Proc = procID{}
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return sharedMount{}, status.Errorf(codes.Internal, "creating %s: %v", m.Dir, err)
	}
	p, err := d.mounter.start(ctx, v, m.Dir, d.logPath(v.Key))
	if err != nil {
		if !ok { // nothing else uses the directory or the log
			_ = os.Remove(m.Dir)
			_ = os.Remove(d.logPath(v.Key))
		} else if perr := d.reg.put(m); perr != nil { // the stopped process is gone
			d.log.Warn("recording a stopped shared mount", "mount", v.Key, "err", perr)
		}
		code := codes.Internal
		if errors.Is(err, errRefused) {
			code = codes.InvalidArgument
		}
		return sharedMount{}, status.Errorf(code, "starting the shared mount: %v", err)
	}
	m.Proc = p
	if err := d.reg.put(m); err != nil {
		_ = d.mounter.stop(ctx, p, m.Dir)
		return sharedMount{}, status.Error(codes.Internal, err.Error())
	}
	d.log.Info("started a shared mount", "mount", v.Key, "pid", p.PID)
	return m, nil
}

func (d *driver) logPath(key string) string {
	return filepath.Join(d.stateDir, "logs", key+".log")
}

// NodeUnpublishVolume unmounts the target and removes it; the shared mount
// stops with its last target. It touches only targets it published for
// this volume: anything else (a path it never published, another
// volume's target, a shared mount's directory) succeeds untouched, as
// does a target that is gone, not mounted, or whose lakefs-mount died.
func (d *driver) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("no volume id in the request")
	}
	if req.GetTargetPath() == "" {
		return nil, invalid("no target path in the request")
	}
	if !filepath.IsAbs(req.GetTargetPath()) {
		return nil, invalid("target path %q is not absolute", req.GetTargetPath())
	}
	target := filepath.Clean(req.GetTargetPath())
	key, ok := d.reg.keyOf(target)
	if !ok {
		d.log.Info("unpublish of a target this driver did not publish: nothing to do", "volume", req.GetVolumeId(), "target", target)
		return &csipb.NodeUnpublishVolumeResponse{}, nil
	}
	unlock := d.reg.lock(key)
	defer unlock()
	m, ok := d.reg.get(key)
	if !ok || !slices.Contains(m.Targets, target) {
		return &csipb.NodeUnpublishVolumeResponse{}, nil // a concurrent unpublish did it
	}
	if id := m.Volumes[target]; id != "" && id != req.GetVolumeId() {
		d.log.Warn("unpublish of a target published for another volume: nothing to do", "volume", req.GetVolumeId(), "target", target)
		return &csipb.NodeUnpublishVolumeResponse{}, nil
	}
	if err := removeTarget(target); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := d.release(ctx, key, target); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	d.log.Info("unpublished", "volume", req.GetVolumeId(), "target", target, "mount", key)
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// release drops target from key's mount and stops the mount if it was the
// last. REQUIRES key's lock.
func (d *driver) release(ctx context.Context, key, target string) error {
	m, ok := d.reg.get(key)
	if !ok {
		return nil // released by a concurrent unpublish of the same target
	}
	m.Targets = slices.DeleteFunc(m.Targets, func(t string) bool { return t == target })
	if len(m.Targets) > 0 {
		return d.reg.put(m)
	}
	if err := d.mounter.stop(ctx, m.Proc, m.Dir); err != nil {
		return err
	}
	if err := os.Remove(m.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", m.Dir, err)
	}
	_ = os.Remove(d.logPath(key)) // a clean stop: nothing to look into
	m.Proc = procID{}
	if err := d.reg.put(m); err != nil {
		return err
	}
	d.log.Info("stopped a shared mount", "mount", key)
	return nil
}
