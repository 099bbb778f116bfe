package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
func (d *driver) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	target, err := checkPublish(req)
	if err != nil {
		return nil, err
	}
	v, err := volumeOf(req.GetVolumeContext(), req.GetSecrets(), d.nodeID)
	if err != nil {
		return nil, err
	}
	unlock := d.reg.lock(v.Key)
	defer unlock()
	if k, ok := d.reg.keyOf(target); ok && k != v.Key {
		return nil, status.Errorf(codes.AlreadyExists, "target %s is published for another volume's options; unpublish it first", target)
	}
	m, err := d.serving(ctx, v)
	if err != nil {
		return nil, err
	}
	if slices.Contains(m.Targets, target) {
		if s, err := stateOf(target); err == nil && s == mountedLive {
			return &csipb.NodePublishVolumeResponse{}, nil
		}
		// Recorded but not mounted (a crash between the two): bind again.
		_ = unmountAll(target)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "creating target %s: %v", target, err)
	}
	if err := bindReadOnly(m.Dir, target); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if !slices.Contains(m.Targets, target) {
		m.Targets = append(m.Targets, target)
	}
	if err := d.reg.put(m); err != nil {
		_ = unmountAll(target)
		return nil, status.Error(codes.Internal, err.Error())
	}
	d.log.Info("published", "volume", req.GetVolumeId(), "target", target, "mount", m.Key, "users", len(m.Targets))
	return &csipb.NodePublishVolumeResponse{}, nil
}

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
	return filepath.Clean(req.GetTargetPath()), nil
}

// serving returns v's shared mount with a live process, starting one if
// there is none or the recorded one died (its old targets stay dead until
// unpublished: a bind of a dead FUSE connection cannot be revived).
// REQUIRES v.Key's lock.
func (d *driver) serving(ctx context.Context, v volume) (sharedMount, error) {
	m, ok := d.reg.get(v.Key)
	if ok && m.Proc.alive() {
		if s, err := stateOf(m.Dir); err == nil && s == mountedLive {
			return m, nil
		}
	}
	if !ok {
		m = sharedMount{Key: v.Key, Dir: filepath.Join(d.stateDir, "mounts", v.Key)}
	}
	if err := d.mounter.stop(ctx, m.Proc, m.Dir); err != nil {
		return sharedMount{}, status.Error(codes.Internal, err.Error())
	}
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return sharedMount{}, status.Errorf(codes.Internal, "creating %s: %v", m.Dir, err)
	}
	p, err := d.mounter.start(ctx, v, m.Dir, d.logPath(v.Key))
	if err != nil {
		if !ok { // nothing else uses the directory or the log
			_ = os.Remove(m.Dir)
			_ = os.Remove(d.logPath(v.Key))
		}
		return sharedMount{}, status.Errorf(codes.Internal, "starting the shared mount: %v", err)
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
// stops with its last target. It succeeds on a target that is gone, not
// mounted, or whose lakefs-mount died.
func (d *driver) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("no volume id in the request")
	}
	if req.GetTargetPath() == "" {
		return nil, invalid("no target path in the request")
	}
	target := filepath.Clean(req.GetTargetPath())
	key, ok := d.reg.keyOf(target)
	if !ok {
		if err := removeTarget(target); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		return &csipb.NodeUnpublishVolumeResponse{}, nil
	}
	unlock := d.reg.lock(key)
	defer unlock()
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
