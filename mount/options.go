package mount

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lakestream/lakestream/cache"
	"github.com/lakestream/lakestream/internal/flagval"
)

// Option is one lakefs-mount option, defined once for the command's flags,
// the CSI volume attributes (named exactly as the long flags), Options.Args
// and Options.ShareKey.
type Option struct {
	Name    string // the long flag without "--", and the volume attribute
	Env     string // environment variable read when the flag is not given
	Default string // parsed by Set when nothing else is given
	Usage   string
	Bool    bool // a flag without a value
	Hidden  bool // benchmarks only: not shown, not a volume attribute
	// Share: the option changes what gc and producers' back-pressure see
	// of this mount (its heartbeat or what it records), so mounts that
	// differ in it must not be served by one process.
	Share bool
	set   func(o *Options, flag, v string) error
	// get formats the option's value in o; "" means unset (the default).
	get func(o *Options) string
}

// Set parses v, given as this option, into o; errors are usage errors
// naming --Name and the allowed values.
func (op Option) Set(o *Options, v string) error { return op.set(o, "--"+op.Name, v) }

// OptionTable lists every lakefs-mount option; Args writes them in this order.
func OptionTable() []Option {
	return []Option{
		{Name: "store", Env: "LAKEFS_STORE", Share: true,
			Usage: "stream URL: file:///abs/dir, s3://bucket/prefix?endpoint=...&region=..., gs://bucket/prefix or az://container/prefix?account=...",
			set:   func(o *Options, _, v string) error { o.Store = v; return nil },
			get:   func(o *Options) string { return o.Store }},
		{Name: "ranks", Share: true, Usage: "ranks this node shows, e.g. 0-3,8 (default: all; only what readers open is fetched)",
			set: func(o *Options, _, v string) (err error) {
				o.Ranks = nil
				if v != "" {
					o.Ranks, err = flagval.ParseRanks(v)
				}
				return err
			},
			get: func(o *Options) string { return flagval.FormatRanks(o.Ranks) }},
		intOption("view-ranks", "0", true, func(o *Options) *int { return &o.ViewRanks },
			"show the stream as R2 ranks (R2 divides R): rank-r holds original ranks r*(R/R2)..(r+1)*(R/R2)-1 as rank-<original>/ directories"),
		sizeOption("cache-size", DefaultCacheSize, MinCacheSize, machineMemory(), func(o *Options) *int64 { return &o.CacheSize },
			"memory for cached and prefetched blocks and verified whole files; the process uses about this plus 128MiB. At least 16 of the stream's chunks (64KiB for 4KiB chunks, 16MiB for 1MiB ones), at most this machine's memory"),
		intOption("prefetch-steps", strconv.Itoa(DefaultPrefetchSteps), false, func(o *Options) *int { return &o.PrefetchSteps },
			"P: opening a file of step n prefetches steps n..n+P (0: off)"),
		durationOption("wait", 0, false, func(o *Options) *time.Duration { return &o.Wait },
			"how long opening a step that is not committed yet waits for it (0: fail at once with ENOENT)"),
		{Name: "checkpoint-dir", Share: true, Usage: "watch this directory for training checkpoints and record them in the manifest",
			set: func(o *Options, _, v string) error { o.CheckpointDir = v; return nil },
			get: func(o *Options) string { return o.CheckpointDir }},
		{Name: "metrics-addr", Usage: "serve Prometheus metrics at HOST:PORT/metrics (:PORT binds 127.0.0.1)",
			set: func(o *Options, _, v string) error { o.MetricsAddr = v; return nil },
			get: func(o *Options) string { return o.MetricsAddr }},
		durationOption("poll-interval", DefaultPollInterval, false, func(o *Options) *time.Duration { return &o.PollInterval },
			"how often to check the manifest log for new steps while a reader waits for one or reads near the head, until the commit cadence is known (then just after each commit is due, retries at most 4x this apart)"),
		durationOption("idle-poll-interval", DefaultIdlePollInterval, false, func(o *Options) *time.Duration { return &o.IdlePollInterval },
			"how often to check it otherwise (idle or lagging readers)"),
		{Name: "node-id", Share: true,
			Usage: "this mount's name in _consumers/<node-id>.json (default: host name plus a hash of the mount point); a second live mount with the same id is refused",
			set:   func(o *Options, _, v string) error { o.NodeID = v; return nil },
			get:   func(o *Options) string { return o.NodeID }},
		durationOption("heartbeat-interval", DefaultHeartbeatInterval, true, func(o *Options) *time.Duration { return &o.HeartbeatInterval },
			"the least time between heartbeat writes: written when the position moved while the head stood still, else once per 6 intervals or per minute, whichever is shorter; at most 1m, so that a heartbeat is never older than the 3m after which gc and --max-lead count the mount as gone"),
		sizeOption("read-ahead", DefaultReadAhead, MinReadAhead, MaxReadAhead, func(o *Options) *int64 { return &o.ReadAhead },
			"kernel read-ahead of the mount"),
		{Name: "passthrough", Default: PassthroughAuto,
			Usage: "serve whole verified files from memory the kernel reads directly (FUSE passthrough): auto (when the kernel allows it), on (fail if not) or off (every read through this process)",
			set: func(o *Options, flag, v string) error {
				switch v = strings.TrimSpace(v); v {
				case PassthroughAuto, PassthroughOn, PassthroughOff:
					o.Passthrough = v
					return nil
				}
				return flagval.Usagef("%s %q is not auto, on or off", flag, v)
			},
			get: func(o *Options) string {
				if o.Passthrough == PassthroughAuto {
					return ""
				}
				return o.Passthrough
			}},
		zeroIsDefault(intOption("fetchers", strconv.Itoa(cache.DefaultFetchers), false, func(o *Options) *int { return &o.Fetchers },
			"concurrent prefetch GETs")),
		hidden(zeroIsDefault(intOption("fills-per-rank", strconv.Itoa(cache.DefaultFillsPerRank), false, func(o *Options) *int { return &o.FillsPerRank },
			"passthrough files fetched at once per rank being read, plus one in all (benchmarks)"))),
		hidden(durationOption("store-retry", DefaultStoreRetry, false, func(o *Options) *time.Duration { return &o.StoreRetry },
			"how long a read waits out transient store errors (refused or reset connections, timeouts, 5xx, throttling) before it fails with EIO")),
		hidden(durationOption("store-latency", 0, false, func(o *Options) *time.Duration { return &o.StoreLatency },
			"add this latency to every data GET (benchmarks: simulate a remote store)")),
		hidden(durationOption("clock-offset", 0, false, func(o *Options) *time.Duration { return &o.ClockOffset },
			"shift this process's clock by this much, e.g. -10m (tests: a machine whose clock is wrong; the store's clock, measured, cancels it)")),
		boolOption("allow-other", func(o *Options) *bool { return &o.AllowOther },
			"let users other than the mounting one read (default: only the mounting user)"),
		boolOption("pprof", func(o *Options) *bool { return &o.Profiling },
			"serve Go's pprof profiles at --metrics-addr/debug/pprof/"),
		boolOption("debug", func(o *Options) *bool { return &o.Debug },
			"log debug messages and every FUSE request"),
	}
}

func hidden(op Option) Option { op.Hidden = true; return op }

// zeroIsDefault: a zero value in Options means the default, so Args
// leaves it out, and a 0 given by the user (a flag or a CSI attribute) is
// refused: it would silently mean the default (16 fetchers), where a 0
// elsewhere means off or is refused.
func zeroIsDefault(op Option) Option {
	get, set := op.get, op.set
	op.get = func(o *Options) string {
		if v := get(o); v != "0" {
			return v
		}
		return ""
	}
	op.set = func(o *Options, flag, v string) error {
		if err := set(o, flag, v); err != nil {
			return err
		}
		if get(o) == "0" {
			return flagval.Usagef("%s 0 is out of range; use at least 1 (the default is %s)", flag, op.Default)
		}
		return nil
	}
	return op
}

func intOption(name, def string, share bool, field func(*Options) *int, usage string) Option {
	return Option{Name: name, Default: def, Share: share, Usage: usage,
		set: func(o *Options, flag, v string) error {
			n, err := flagval.ParseInt[int](v)
			if err != nil {
				return flagval.Usagef("%s %w", flag, err)
			}
			*field(o) = n
			return nil
		},
		get: func(o *Options) string { return strconv.Itoa(*field(o)) }}
}

// durationOption: a zero duration in Options means def. Where def is not
// zero, a 0 given by the user is refused: it would silently mean the
// default, which is not what anyone writing 0 means.
func durationOption(name string, def time.Duration, share bool, field func(*Options) *time.Duration, usage string) Option {
	return Option{Name: name, Default: def.String(), Share: share, Usage: usage,
		set: func(o *Options, flag, v string) error {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return flagval.Usagef("%s %q is not a duration; use a value like 500ms, 10s or 5m", flag, v)
			}
			if d == 0 && def != 0 {
				return flagval.Usagef("%s %s: give a positive duration (the default is %s)", flag, v, def)
			}
			*field(o) = d
			return nil
		},
		get: func(o *Options) string {
			if *field(o) == 0 {
				return ""
			}
			return field(o).String()
		}}
}

// sizeOption: a zero size in Options means def.
func sizeOption(name string, def, lo, hi int64, field func(*Options) *int64, usage string) Option {
	return Option{Name: name, Default: flagval.FormatSize(def), Usage: usage,
		set: func(o *Options, flag, v string) error {
			n, err := flagval.ParseSize(flag, v, lo, hi)
			*field(o) = n
			return err
		},
		get: func(o *Options) string {
			if *field(o) == 0 {
				return ""
			}
			return flagval.FormatSize(*field(o))
		}}
}

func boolOption(name string, field func(*Options) *bool, usage string) Option {
	return Option{Name: name, Default: "false", Bool: true, Usage: usage,
		set: func(o *Options, flag, v string) error {
			b, err := strconv.ParseBool(strings.TrimSpace(v))
			if err != nil {
				return flagval.Usagef("%s %q is not true or false", flag, v)
			}
			*field(o) = b
			return nil
		},
		get: func(o *Options) string { return strconv.FormatBool(*field(o)) }}
}

// DefaultOptions returns Options holding every option's default, as the
// command starts from.
func DefaultOptions() Options {
	var o Options
	for _, op := range OptionTable() {
		if err := op.Set(&o, op.Default); err != nil {
			panic(fmt.Sprintf("mount: default of --%s: %v", op.Name, err)) // a bug in the table
		}
	}
	return o
}

// ParseAttributes parses CSI volume attributes named exactly as the long
// flags (store, ranks, view-ranks, cache-size, ...) with the flags' rules
// and messages; an unknown attribute is an error naming it. Attributes not
// given take the defaults; the mount point is left to the caller.
func ParseAttributes(attrs map[string]string) (Options, error) {
	o := DefaultOptions()
	byName := map[string]Option{}
	var names []string
	for _, op := range OptionTable() {
		if !op.Hidden {
			byName[op.Name] = op
			names = append(names, op.Name)
		}
	}
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad attribute is the same every time
	for _, k := range keys {
		op, ok := byName[k]
		if !ok {
			return Options{}, flagval.Usagef("unknown volume attribute %q; known: %s", k, strings.Join(names, ", "))
		}
		if err := op.Set(&o, attrs[k]); err != nil {
			return Options{}, err
		}
	}
	if err := o.validate(); err != nil {
		return Options{}, err
	}
	return o, nil
}

// Args returns the lakefs-mount command line (without the program name)
// that mounts o: every option that differs from its default, then the
// mount point.
func (o Options) Args() []string {
	var args []string
	for _, op := range OptionTable() {
		v := op.get(&o)
		switch {
		case v == "" || v == op.Default:
		case op.Bool:
			args = append(args, "--"+op.Name)
		default:
			args = append(args, "--"+op.Name+"="+v)
		}
	}
	return append(args, o.Mountpoint)
}

// ShareKey identifies the mounts one lakefs-mount may serve: two Options
// with the same key read the same view of the same stream and look the same
// to gc and producers' back-pressure (store, ranks, view, checkpoint dir,
// node id, heartbeat interval). Pods of different jobs must get different
// node ids: one heartbeat would hide the slower reader. The key is a hex
// digest, safe in paths and logs (the store URL is not readable from it).
func (o Options) ShareKey() string {
	h := sha256.New()
	for _, op := range OptionTable() {
		if op.Share {
			v := op.get(&o)
			if v == "" {
				v = op.Default
			}
			fmt.Fprintf(h, "%s=%q\n", op.Name, v)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
