package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// parseFlags parses args (without the program name) as lakefs-mount does.
func parseFlags(t *testing.T, args []string) (mount.Options, error) {
	t.Helper()
	var o mount.Options
	var perr error
	app := &cli.App{Name: "lakefs-mount", Flags: flags(), Action: func(cc *cli.Context) error {
		o, _, perr = parseOptions(cc, &bytes.Buffer{})
		return nil
	}}
	if err := app.Run(append([]string{"lakefs-mount"}, args...)); err != nil {
		t.Fatalf("flags %q: %v", args, err)
	}
	o.Logger = nil
	return o, perr
}

// TestFlagsAndAttributesAgree: the volume attributes the CSI driver gets,
// turned into a command line by Options.Args, parse back through
// lakefs-mount's flags to the same Options.
func TestFlagsAndAttributesAgree(t *testing.T) {
	o, err := mount.ParseAttributes(map[string]string{
		"store": "file:///data/s", "ranks": "0-3", "view-ranks": "2", "wait": "1m", "cache-size": "512MiB",
		"prefetch-steps": "0", "checkpoint-dir": "/ckpt", "node-id": "node-7", "allow-other": "true",
	})
	if err != nil {
		t.Fatal(err)
	}
	o.Mountpoint = "/mnt/s"
	got, err := parseFlags(t, o.Args())
	if err != nil || !reflect.DeepEqual(got, o) {
		t.Errorf("flags %q gave\n%+v, %v\nwant\n%+v", o.Args(), got, err, o)
	}
	if got, err := parseFlags(t, []string{"/mnt/s"}); err != nil || !reflect.DeepEqual(got, withMountpoint(mount.DefaultOptions(), "/mnt/s")) {
		t.Errorf("no flags gave %+v, %v; want the defaults", got, err)
	}
}

func withMountpoint(o mount.Options, m string) mount.Options { o.Mountpoint = m; return o }

// TestUsageErrorsExit2: bad sizes say the allowed range and exit 2.
func TestUsageErrorsExit2(t *testing.T) {
	for args, want := range map[string]string{
		"--cache-size 0 /mnt": "--cache-size 0 is out of range; use 64KiB to ",
		// Issue 47 item 2: the range stops at this machine's memory.
		"--cache-size 1PiB /mnt": "--cache-size 1PiB is out of range; use 64KiB to ",
		// Issue 47 item 10.
		"--store file:///s --metrics-addr nonsense /mnt":   `--metrics-addr: metrics address "nonsense": the port "nonsense" is not a number`,
		"--store file:///s --idle-poll-interval 0 /mnt":    "--idle-poll-interval 0: give a positive duration (the default is 10s)",
		"--store file:///s --heartbeat-interval 10m /mnt":  "--heartbeat-interval 10m0s is too long",
		"--read-ahead 0 /mnt":                              "--read-ahead 0 is out of range; use 4KiB to 1GiB",
		"--cache-size 2x /mnt":                             `--cache-size "2x" is not a size`,
		"--store file:///nowhere --prefetch-steps -1 /mnt": "--prefetch-steps -1 is negative",
		"--store file:///nowhere --fetchers -3 /mnt":       "--fetchers -3 is negative; use at least 1",
		"--store file:///nowhere --fills-per-rank -1 /mnt": "--fills-per-rank -1 is negative; use at least 1",
		// Issue 55 item 15: 0 silently meant the default (16, 1).
		"--store file:///nowhere --fetchers 0 /mnt":       "--fetchers 0 is out of range; use at least 1 (the default is 16)",
		"--store file:///nowhere --fills-per-rank 0 /mnt": "--fills-per-rank 0 is out of range; use at least 1 (the default is 1)",
		"--store file:///nowhere --fetchers 000 /mnt":     "--fetchers 0 is out of range; use at least 1",
		"--store file:///s":                               "want exactly one argument, the mount point, got 0",
		// Issue 32 item 8: decimal only, as lakefs-produce.
		"--store file:///s --prefetch-steps 0x3 /mnt": `--prefetch-steps "0x3" is not a decimal whole number`,
		"--store file:///s --ready-fd 0x3 /mnt":       `--ready-fd "0x3" is not a decimal whole number`,
		// Issue 32 item 1: the mount logged the secret, URL-encoded.
		"--store s3://b/p?endpoint=http://AKIAUSERX:SuperSecret123@127.0.0.1:1 /mnt": "carries credentials (user:secret@ in endpoint=)",
	} {
		var stderr bytes.Buffer
		code := run(append([]string{"lakefs-mount"}, strings.Fields(args)...), &bytes.Buffer{}, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), want) || strings.Contains(stderr.String(), "SuperSecret123") {
			t.Errorf("lakefs-mount %s: exit %d, %q; want 2 and %q", args, code, stderr.String(), want)
		}
	}
}

// TestCacheSizeBelowStreamChunks (issue 47 item 2): --cache-size within
// the documented range but too small for the stream's chunks says so in
// sizes (before: "give at least 16777216 bytes" under a help that allowed
// 64KiB).
func TestCacheSizeBelowStreamChunks(t *testing.T) {
	dir := t.TempDir()
	s, err := store.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := txn.Create(t.Context(), s, txn.CreateOptions{Ranks: 1, ChunkSize: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := run([]string{"lakefs-mount", "--store", "file://" + dir, "--cache-size", "64KiB", t.TempDir()}, &bytes.Buffer{}, &stderr)
	want := "--cache-size 64KiB holds fewer than 16 of this stream's 1MiB chunks; use at least 16MiB"
	if code != 2 || !strings.Contains(stderr.String(), want) {
		t.Fatalf("exit %d, %q; want 2 and %q", code, stderr.String(), want)
	}
}
