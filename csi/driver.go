// Package csi is a node-only Container Storage Interface plugin: a pod
// mounts a Lakestream stream as a volume (a CSI ephemeral inline volume or
// a static PersistentVolume) whose attributes are lakefs-mount's options.
//
// # Shape
//
// Volumes of one consumer (the volume id, or the "consumer" attribute)
// with the same view (mount.Options.ShareKey: what gc and back-pressure
// see) and the same credentials share one lakefs-mount per node (one cache, one poller, one heartbeat), mounted at
// <state-dir>/mounts/<key>; each pod's target is a read-only bind mount
// of it. The process is started, awaited (--ready-fd) and, while this
// driver instance runs, stopped through mount/proc. The lakefs-mount processes run in their own process group (and,
// with --mount-cgroup, their own cgroup), so restarting or upgrading the
// driver does not take pods' mounts down: a new driver reads the registry
// persisted at <state-dir>/registry.json, adopts the mounts whose process
// still serves, and cleans the ones left dead.
//
// # Invariants
//
//   - A shared mount is in the registry while it has at least one target,
//     and only then: the last unpublish stops its process and removes it.
//   - The registry file on disk is written (atomically, by rename) before
//     a publish answers and after an unpublish has unmounted, so a driver
//     restarted at any point finds every target it answered for.
//   - Credentials (the volume's secret) go only into the environment of the
//     lakefs-mount process; they are hashed into the share key and never
//     logged, returned in an error, written to disk or put in argv.
//
// # Locks
//
// registry.mu guards the registry's maps and the state file; each share
// key has its own lock, held across a publish or unpublish of that key
// (starting or stopping a process takes seconds); execMounter.mu guards
// the processes this instance started. Lock order: key lock, then
// registry.mu or execMounter.mu, never both; neither is held across a
// process start, a mount or an unmount. Across processes, an flock on
// <state-dir>/lock keeps a second driver off the state directory.
package csi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/lakestream/lakestream/internal/buildinfo"
	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/mount/proc"
)

// DriverName is the CSI driver's name: the CSIDriver object, the
// registrar's socket directory and every volume's `driver` field use it.
const DriverName = "csi.lakestream.io"

// Defaults of the command line, the same paths the manifests use.
const (
	DefaultEndpoint = "unix:///csi/csi.sock"
	DefaultStateDir = "/var/lib/lakestream-csi"
)

// Options configure the driver.
type Options struct {
	// Endpoint is the gRPC endpoint, unix:///path/to/csi.sock.
	Endpoint string
	// NodeID is the Kubernetes node name: NodeGetInfo returns it, and each
	// lakefs-mount's heartbeat is named after it.
	NodeID string
	// StateDir holds the registry and the shared mounts. It must be on
	// the host (a hostPath) with mount propagation, so that mounts made
	// under it reach the kubelet's pod directories and outlive the driver.
	StateDir string
	// MountBinary is the lakefs-mount executable; "" finds it next to
	// this executable, then on PATH.
	MountBinary string
	// MountCgroup, if set, is a cgroup v2 directory (e.g.
	// /sys/fs/cgroup/lakestream) under which each lakefs-mount gets a
	// cgroup of its own, outside the driver container's.
	MountCgroup string
	Logger      *slog.Logger
}

func (o *Options) check() error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.NodeID == "" {
		return flagval.Usagef("no node id; pass --node-id NAME or set KUBE_NODE_NAME (the manifests set it from spec.nodeName)")
	}
	if o.StateDir == "" || !filepath.IsAbs(o.StateDir) {
		return flagval.Usagef("--state-dir %q must be an absolute directory", o.StateDir)
	}
	if o.MountCgroup != "" {
		if err := checkCgroup2(o.MountCgroup); err != nil {
			return err
		}
	}
	if o.MountBinary == "" {
		if o.MountBinary = proc.FindBin(); o.MountBinary == "" {
			return flagval.Usagef("lakefs-mount is neither next to lakefs-csi nor on PATH; pass --mount-binary PATH")
		}
	}
	if _, err := socketPath(o.Endpoint); err != nil {
		return err
	}
	return nil
}

// checkCgroup2 tells whether dir is (or would be created) in a cgroup v2
// hierarchy: on cgroup v1 every start would fail.
func checkCgroup2(dir string) error {
	if !filepath.IsAbs(dir) {
		return flagval.Usagef("--mount-cgroup %q must be an absolute directory in a cgroup v2 hierarchy", dir)
	}
	p := dir
	var st unix.Statfs_t
	for {
		err := unix.Statfs(p, &st)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.ENOENT) || p == "/" {
			return flagval.Usagef("--mount-cgroup %s: %v", dir, err)
		}
		p = filepath.Dir(p)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return flagval.Usagef("--mount-cgroup %s is not in a cgroup v2 hierarchy (%s is not cgroup2; a cgroup v1 node?); pass --mount-cgroup \"\" (the chart's node.mountCgroup: \"\") or a directory under the cgroup2 mount", dir, p)
	}
	return nil
}

// socketPath returns the file of a unix:// endpoint.
func socketPath(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "unix" || u.Host != "" || !filepath.IsAbs(u.Path) {
		return "", flagval.Usagef("--endpoint %q must be unix:///absolute/path.sock", endpoint)
	}
	return u.Path, nil
}

// Run serves the Identity and Node services on o.Endpoint until ctx ends.
// Errors in o wrap flagval.ErrUsage.
// It first adopts or cleans the mounts an earlier driver left behind.
// Shared mounts keep running after it returns.
func Run(ctx context.Context, o Options) error {
	if err := o.check(); err != nil {
		return err
	}
	unlock, err := lockStateDir(o.StateDir)
	if err != nil {
		return err
	}
	defer unlock()
	sock, _ := socketPath(o.Endpoint)
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		return fmt.Errorf("creating the socket directory: %w", err)
	}
	if err := removeStaleSocket(ctx, sock); err != nil {
		return err
	}
	d, err := newDriver(ctx, o, newExecMounter(o.MountBinary, o.MountCgroup))
	if err != nil {
		return err
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", sock, err)
	}
	// Unlink on exit only the socket this instance made: another one may
	// have taken the path since.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	var mine unix.Stat_t
	_ = unix.Stat(sock, &mine)
	defer func() {
		var st unix.Stat_t
		if unix.Stat(sock, &st) == nil && st.Ino == mine.Ino && st.Dev == mine.Dev {
			_ = os.Remove(sock)
		}
	}()
	srv := d.server()
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		srv.GracefulStop()
	}()
	o.Logger.Info("serving", "driver", DriverName, "version", buildinfo.Short(), "endpoint", o.Endpoint, "node", o.NodeID)
	err = srv.Serve(l)
	<-done
	return err
}

// lockStateDir takes an exclusive flock on <stateDir>/lock (the kernel
// drops it when this process dies, even by kill -9), so that two drivers
// never share a registry; the returned function releases it.
func lockStateDir(stateDir string) (unlock func(), err error) {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the state directory: %w", err)
	}
	path := filepath.Join(stateDir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("state directory %s is in use by another lakefs-csi (pid %s); stop it, or give each driver its own --state-dir", stateDir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	// The holder's pid is for the message above only.
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}

// removeStaleSocket removes a socket file left by a killed driver (it
// refuses the bind), and refuses a socket another process still serves.
func removeStaleSocket(ctx context.Context, sock string) error {
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if c, err := (&net.Dialer{}).DialContext(dctx, "unix", sock); err == nil {
		c.Close()
		return fmt.Errorf("socket %s is served by another process (a second lakefs-csi?); stop it or pass another --endpoint", sock)
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the old socket %s: %w", sock, err)
	}
	return nil
}

// driver implements the CSI Identity and Node services.
type driver struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer

	nodeID   string
	stateDir string
	log      *slog.Logger
	mounter  mounter
	reg      *registry
}

func newDriver(ctx context.Context, o Options, m mounter) (*driver, error) {
	reg, err := openRegistry(o.StateDir)
	if err != nil {
		return nil, err
	}
	d := &driver{nodeID: o.NodeID, stateDir: o.StateDir, log: o.Logger, mounter: m, reg: reg}
	if err := d.recover(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// server returns a gRPC server with the driver's services, logging every
// call's method and outcome (never its request: it may carry secrets).
func (d *driver) server() *grpc.Server {
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.logCall))
	csipb.RegisterIdentityServer(srv, d)
	csipb.RegisterNodeServer(srv, d)
	return srv
}

func (d *driver) logCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	if err != nil {
		d.log.Warn("call failed", "method", method, "code", status.Code(err), "err", status.Convert(err).Message())
	} else if method != "Probe" && !strings.HasSuffix(method, "Capabilities") && method != "GetPluginInfo" {
		d.log.Info("call", "method", method)
	}
	return resp, err
}

// GetPluginInfo names the driver.
func (d *driver) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: DriverName, VendorVersion: buildinfo.Short()}, nil
}

// GetPluginCapabilities: no controller service, no topology.
func (d *driver) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return &csipb.GetPluginCapabilitiesResponse{}, nil
}

// Probe answers ready once the driver serves: recovery ran before.
func (d *driver) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// invalid is an InvalidArgument status.
func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}
