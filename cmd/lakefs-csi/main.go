// Command lakefs-csi is the Kubernetes CSI node plugin: pods mount a
// Lakestream stream as a volume.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/csi"
	"github.com/lakestream/lakestream/internal/buildinfo"
	"github.com/lakestream/lakestream/internal/flagval"
)

const description = `Serves the CSI Identity and Node services on --endpoint (a node-only
driver: no controller, attachRequired: false). Run by the node DaemonSet in
deploy/kubernetes/; see docs/KUBERNETES.md.

Volumes of one consumer (the volume id, or the "consumer" attribute) with
the same view of a stream (store, ranks, view-ranks, checkpoint-dir) and the
same secret share one lakefs-mount per node, mounted
under --state-dir/mounts/; each pod gets a read-only bind mount of it.
The lakefs-mount processes outlive the driver: a restarted driver adopts the
ones still serving and cleans the dead ones.

EXAMPLES:
   lakefs-csi --endpoint unix:///csi/csi.sock --node-id "$KUBE_NODE_NAME"

EXIT STATUS:
   0  stopped by SIGINT/SIGTERM
   1  operational error (socket or state directory in use, ...)
   2  usage error (bad flag, --mount-cgroup not on cgroup v2)`

func main() {
	os.Exit(run(os.Args))
}

func run(args []string) int {
	var o csi.Options
	actionRan := false
	app := &cli.App{
		Name:        "lakefs-csi",
		Usage:       "Kubernetes CSI node plugin for Lakestream streams",
		UsageText:   "lakefs-csi [--endpoint unix:///csi/csi.sock] [--node-id NAME] [options]",
		Version:     buildinfo.Version(),
		Description: description,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "endpoint", EnvVars: []string{"CSI_ENDPOINT"}, Value: csi.DefaultEndpoint, Destination: &o.Endpoint,
				Usage: "gRPC endpoint the kubelet's registrar connects to"},
			&cli.StringFlag{Name: "node-id", EnvVars: []string{"KUBE_NODE_NAME"}, Destination: &o.NodeID,
				Usage: "the Kubernetes node name (from spec.nodeName), not the container's host name"},
			&cli.StringFlag{Name: "state-dir", Value: csi.DefaultStateDir, Destination: &o.StateDir,
				Usage: "host directory (with mount propagation) for the registry and the shared mounts"},
			&cli.StringFlag{Name: "mount-binary", Destination: &o.MountBinary,
				Usage: "the lakefs-mount executable (default: next to lakefs-csi, then on PATH)"},
			&cli.StringFlag{Name: "mount-cgroup", Destination: &o.MountCgroup,
				Usage: "cgroup v2 directory under which each lakefs-mount gets its own cgroup, so the container runtime does not kill it with the driver (e.g. /sys/fs/cgroup/lakestream)"},
		},
		HideHelpCommand: true,
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return err
		},
		Action: func(cc *cli.Context) error {
			actionRan = true
			if cc.NArg() != 0 {
				return flagval.Usagef("unexpected argument %q; lakefs-csi takes only flags", cc.Args().First())
			}
			o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			ctx, stop := signal.NotifyContext(cc.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return csi.Run(ctx, o)
		},
	}
	err := app.RunContext(context.Background(), args)
	switch {
	case err == nil:
		return 0
	case !actionRan || errors.Is(err, flagval.ErrUsage):
		fmt.Fprintln(os.Stderr, "lakefs-csi:", err)
		return 2
	default:
		fmt.Fprintln(os.Stderr, "lakefs-csi:", err)
		return 1
	}
}
