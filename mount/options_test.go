package mount

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/flagval"
)

// parseArgs parses what Options.Args writes, with the option table, as
// lakefs-mount's flags do.
func parseArgs(t *testing.T, args []string) Options {
	t.Helper()
	o := DefaultOptions()
	byName := map[string]Option{}
	for _, op := range OptionTable() {
		byName[op.Name] = op
	}
	for _, a := range args[:len(args)-1] {
		name, v, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		op, ok := byName[name]
		if !ok || hasValue == op.Bool {
			t.Fatalf("Args wrote %q: not an option of the table", a)
		}
		if op.Bool {
			v = "true"
		}
		if err := op.Set(&o, v); err != nil {
			t.Fatalf("Args wrote %q: %v", a, err)
		}
	}
	o.Mountpoint = args[len(args)-1]
	return o
}

// TestParseAttributes: volume attributes named as the long flags give the
// Options the flags give, with the flags' messages.
func TestParseAttributes(t *testing.T) {
	o, err := ParseAttributes(map[string]string{
		"store": "file:///data/s", "ranks": "0-3,8", "view-ranks": "4", "wait": "10m",
		"cache-size": "8GiB", "prefetch-steps": "4", "checkpoint-dir": "/ckpt", "node-id": "node-a",
		"read-ahead": "1MiB", "allow-other": "true",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultOptions()
	want.Store, want.Ranks, want.ViewRanks, want.Wait = "file:///data/s", []int{0, 1, 2, 3, 8}, 4, 10*time.Minute
	want.CacheSize, want.PrefetchSteps, want.CheckpointDir, want.NodeID = 8<<30, 4, "/ckpt", "node-a"
	want.ReadAhead, want.AllowOther = 1<<20, true
	if !reflect.DeepEqual(o, want) {
		t.Errorf("ParseAttributes =\n%+v\nwant\n%+v", o, want)
	}
	if d := DefaultOptions(); d.CacheSize != DefaultCacheSize || d.PrefetchSteps != DefaultPrefetchSteps ||
		d.PollInterval != DefaultPollInterval || d.ReadAhead != DefaultReadAhead {
		t.Errorf("DefaultOptions does not hold the package defaults: %+v", d)
	}
	for attrs, want := range map[string]string{
		"cache-size=0":          "--cache-size 0 is out of range; use 64KiB to " + flagval.FormatSize(machineMemory()),
		"cache-size=1PiB":       "--cache-size 1PiB is out of range; use 64KiB to " + flagval.FormatSize(machineMemory()),
		"heartbeat-interval=3m": "--heartbeat-interval 3m0s is too long",
		"heartbeat-interval=0":  "--heartbeat-interval 0: give a positive duration (the default is 10s)",
		"idle-poll-interval=0s": "--idle-poll-interval 0s: give a positive duration (the default is 10s)",
		"poll-interval=0":       "--poll-interval 0: give a positive duration",
		"read-ahead=lots":       `--read-ahead "lots" is not a size; use a value like 256MiB or 2GiB (4KiB to 1GiB)`,
		"ranks=3-1":             `--ranks "3-1" has "3-1", not a range low-high; use a list like 0-3,8`,
		"prefetch-steps=-1":     "--prefetch-steps -1 is negative; use 0 to disable prefetching",
		"fetchers=0":            "--fetchers 0 is out of range; use at least 1 (the default is 16)",
		"node-id=a/b":           `--node-id: node id "a/b" must be 1-128 characters of [A-Za-z0-9._-]`,
		"wait=soon":             `--wait "soon" is not a duration; use a value like 500ms, 10s or 5m`,
		"cache_size=1GiB":       `unknown volume attribute "cache_size"`,
		"store-latency=1s":      `unknown volume attribute "store-latency"`,
		"poll-interval=100ns":   "--poll-interval 100ns is too short; use at least 1ms",
		"view-ranks=two":        `--view-ranks "two" is not a decimal whole number`,
		"allow-other=sometimes": `--allow-other "sometimes" is not true or false`,
	} {
		k, v, _ := strings.Cut(attrs, "=")
		_, err := ParseAttributes(map[string]string{"store": "file:///s", k: v})
		if !errors.Is(err, flagval.ErrUsage) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("ParseAttributes(%s): %v; want a usage error starting %q", attrs, err, want)
		}
	}
}

// TestArgsRoundTrip: Options.Args is a command line that gives the same
// Options back, and names only what differs from the defaults.
func TestArgsRoundTrip(t *testing.T) {
	o := DefaultOptions()
	o.Store, o.Ranks, o.ViewRanks, o.CacheSize, o.Wait = "s3://b/p?endpoint=http://h:9000", []int{1, 2, 5}, 2, 3<<29, 90*time.Second
	o.PrefetchSteps, o.NodeID, o.AllowOther, o.Debug, o.Mountpoint = 0, "n-1", true, true, "/mnt/x y"
	args := o.Args()
	if back := parseArgs(t, args); !reflect.DeepEqual(back, o) {
		t.Errorf("Args %q parse back to\n%+v\nwant\n%+v", args, back, o)
	}
	if got := DefaultOptions().Args(); len(got) != 1 {
		t.Errorf("DefaultOptions().Args() = %q; want only the mount point", got)
	}
	// Zero values of a programmatic Options mean the defaults, so Args
	// leaves them out (prefetch-steps 0 means off, and is kept).
	got := Options{Store: "file:///s", Mountpoint: "/m"}.Args()
	want := []string{"--store=file:///s", "--prefetch-steps=0", "/m"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Options{}.Args() = %q; want %q", got, want)
	}
}

// TestShareKey: mounts differing in what gc and back-pressure see get
// different keys; mounts differing only in local resources share one.
func TestShareKey(t *testing.T) {
	base := DefaultOptions()
	base.Store, base.NodeID = "file:///s", "node-a"
	key := base.ShareKey()
	for name, change := range map[string]func(*Options){
		"store":              func(o *Options) { o.Store = "file:///t" },
		"ranks":              func(o *Options) { o.Ranks = []int{0} },
		"view-ranks":         func(o *Options) { o.ViewRanks = 2 },
		"checkpoint-dir":     func(o *Options) { o.CheckpointDir = "/ckpt" },
		"node-id":            func(o *Options) { o.NodeID = "node-b" },
		"heartbeat-interval": func(o *Options) { o.HeartbeatInterval = time.Second },
	} {
		o := base
		change(&o)
		if o.ShareKey() == key {
			t.Errorf("changing %s keeps the share key", name)
		}
	}
	o := base
	o.CacheSize, o.Mountpoint, o.MetricsAddr, o.HeartbeatInterval = 1<<30, "/elsewhere", ":9100", 0
	if o.ShareKey() != key {
		t.Error("cache size, mount point, metrics address or a zero (default) heartbeat interval changed the share key")
	}
}
