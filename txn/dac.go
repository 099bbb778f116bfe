package txn

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Strategy decides when a producer's committer makes its next attempt and
// how many queued TGBs it may put in one version. The committer calls it
// from one goroutine only.
type Strategy interface {
	// Name is the strategy's command-line name.
	Name() string
	// Delay is how long to wait after the previous attempt (whatever its
	// outcome) before the next one.
	Delay() time.Duration
	// MaxGroup caps the TGBs in one version.
	MaxGroup() int
	// Conflict reports a lost race; Success a committed version.
	Conflict()
	Success()
}

// NewStrategy returns the named strategy with default settings:
//
//	dac    adaptive group commit (the default)
//	naive  one TGB per version, immediate retry
//	fixed  group commit every interval
func NewStrategy(name string) (Strategy, error) {
	switch name {
	case "", "dac":
		return NewDAC(DACConfig{}), nil
	case "naive":
		return naive{}, nil
	case "fixed":
		return &fixed{interval: 50 * time.Millisecond, maxGroup: DefaultMaxGroup}, nil
	}
	return nil, fmt.Errorf("unknown commit strategy %q; use dac, naive or fixed", name)
}

// DefaultMaxGroup caps a version's TGBs so a version record stays small.
const DefaultMaxGroup = 256

type naive struct{}

func (naive) Name() string         { return "naive" }
func (naive) Delay() time.Duration { return 0 }
func (naive) MaxGroup() int        { return 1 }
func (naive) Conflict()            {}
func (naive) Success()             {}

type fixed struct {
	interval time.Duration
	maxGroup int
}

func (f *fixed) Name() string         { return "fixed" }
func (f *fixed) Delay() time.Duration { return f.interval }
func (f *fixed) MaxGroup() int        { return f.maxGroup }
func (f *fixed) Conflict()            {}
func (f *fixed) Success()             {}

// DACConfig tunes Decentralized Adaptive Commit.
type DACConfig struct {
	Min      time.Duration // lower bound of the delay (default 0)
	Max      time.Duration // upper bound (default 2s)
	Initial  time.Duration // delay after the first conflict from Min (default 5ms)
	Factor   float64       // multiplicative increase per conflict (default 2)
	Jitter   float64       // the increase is scaled by a uniform factor in [1-J, 1+J] (default 0.5)
	Decrease time.Duration // additive decrease per success (default 2ms)
	MaxGroup int           // default DefaultMaxGroup
	Seed     uint64        // 0: random
}

// DAC is the Decentralized Adaptive Commit controller: AIMD on the delay
// between commit attempts, like TCP's congestion window in reverse. Each
// lost race multiplies the delay (with jitter, so producers that collided
// once do not collide again in lockstep); each success shortens it by a
// constant. A producer learns of contention only from its own failed
// creates, and while it waits its queue grows, so its next version carries
// more TGBs: under contention commits get larger instead of more frequent.
type DAC struct {
	cfg   DACConfig
	delay time.Duration
	rng   *rand.Rand
}

// NewDAC returns a DAC controller; zero fields of cfg take defaults.
func NewDAC(cfg DACConfig) *DAC {
	if cfg.Max == 0 {
		cfg.Max = 2 * time.Second
	}
	if cfg.Initial == 0 {
		cfg.Initial = 5 * time.Millisecond
	}
	if cfg.Factor == 0 {
		cfg.Factor = 2
	}
	if cfg.Jitter == 0 {
		cfg.Jitter = 0.5
	}
	if cfg.Decrease == 0 {
		cfg.Decrease = 2 * time.Millisecond
	}
	if cfg.MaxGroup == 0 {
		cfg.MaxGroup = DefaultMaxGroup
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &DAC{cfg: cfg, delay: cfg.Min, rng: rand.New(rand.NewPCG(seed, seed+1))}
}

func (d *DAC) Name() string         { return "dac" }
func (d *DAC) Delay() time.Duration { return d.delay }
func (d *DAC) MaxGroup() int        { return d.cfg.MaxGroup }

// Conflict grows the delay: max(delay, Initial) * Factor * U[1-J, 1+J],
// clamped to [Min, Max].
func (d *DAC) Conflict() {
	base := max(d.delay, d.cfg.Initial)
	scale := d.cfg.Factor * (1 - d.cfg.Jitter + 2*d.cfg.Jitter*d.rng.Float64())
	d.delay = d.clamp(time.Duration(float64(base) * scale))
}

// Success shrinks the delay by Decrease, not below Min.
func (d *DAC) Success() { d.delay = d.clamp(d.delay - d.cfg.Decrease) }

func (d *DAC) clamp(x time.Duration) time.Duration { return min(max(x, d.cfg.Min), d.cfg.Max) }
