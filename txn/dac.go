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

// Pacer is implemented by strategies that also learn from the versions
// that land: Committed reports one of this producer's versions, the round
// trip of its create, and how many versions other writers committed since
// this producer's previous one.
type Pacer interface {
	Committed(rtt time.Duration, others int)
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
	Max      time.Duration // upper bound (default 1s)
	Initial  time.Duration // delay after the first conflict from Min (default 5ms)
	Factor   float64       // multiplicative increase per conflict (default 2)
	Jitter   float64       // the increase is scaled by a uniform factor in [1-J, 1+J] (default 0.5)
	Increase float64       // additive increase of the attempt rate per success, in attempts/s (default 10)
	MaxGroup int           // default DefaultMaxGroup
	Seed     uint64        // 0: random
}

// DAC is the Decentralized Adaptive Commit controller: AIMD on a producer's
// commit attempt rate, exactly as TCP shares a link. The delay between
// attempts is the inverse of the rate. Each lost race halves the rate
// (doubles the delay, with jitter, so producers that collided once do not
// collide again in lockstep); each success adds a constant to the rate.
//
// Why the rate and not the delay: with N producers and a commit slot of c
// seconds, the chance that an attempt loses is about N*c*r. Additive
// increase balanced against multiplicative decrease settles where
// N*c*r^2 = 2*Increase, so each producer's rate falls as 1/sqrt(N) while
// the total still rises: commits get larger, not more frequent, as
// producers are added. (AIMD on the delay itself has no such equilibrium:
// it drifts to Min or Max.) A producer learns of contention only from its
// own failed creates.
type DAC struct {
	cfg   DACConfig
	delay time.Duration
	rng   *rand.Rand

	// The fair-share floor (see Committed): smoothed round trip of a
	// create and smoothed count of writers sharing the log.
	rtt     time.Duration
	writers float64
}

// NewDAC returns a DAC controller; zero fields of cfg take defaults.
func NewDAC(cfg DACConfig) *DAC {
	if cfg.Max == 0 {
		cfg.Max = time.Second
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
	if cfg.Increase == 0 {
		cfg.Increase = 10
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

func (d *DAC) Name() string { return "dac" }

// Delay is the AIMD delay, but not less than the fair-share floor.
func (d *DAC) Delay() time.Duration { return d.clamp(max(d.delay, d.floor())) }

// floor is (writers-1) create round trips: with N writers each committing
// once per N round trips, the log takes about one commit per round trip,
// what the store can order, and nobody waits on a writer that never backs
// off. A lone writer (no others' versions between its own) has no floor.
func (d *DAC) floor() time.Duration {
	if d.writers < 1.5 {
		return 0
	}
	return time.Duration((d.writers - 1) * float64(d.rtt))
}

// Committed updates the floor's estimates (exponentially weighted).
func (d *DAC) Committed(rtt time.Duration, others int) {
	const w = 0.3
	if d.rtt == 0 {
		d.rtt = rtt
	} else {
		d.rtt = time.Duration((1-w)*float64(d.rtt) + w*float64(rtt))
	}
	n := float64(min(others, 1024) + 1)
	if d.writers == 0 {
		d.writers = n
	} else {
		d.writers = (1-w)*d.writers + w*n
	}
}

func (d *DAC) MaxGroup() int { return d.cfg.MaxGroup }

// Conflict grows the delay: max(delay, Initial) * Factor * U[1-J, 1+J],
// clamped to [Min, Max].
func (d *DAC) Conflict() {
	base := max(d.delay, d.cfg.Initial)
	scale := d.cfg.Factor * (1 - d.cfg.Jitter + 2*d.cfg.Jitter*d.rng.Float64())
	d.delay = d.clamp(time.Duration(float64(base) * scale))
}

// Success adds Increase to the rate 1/delay, not going below Min.
func (d *DAC) Success() {
	if d.delay <= 0 {
		return
	}
	secs := d.delay.Seconds()
	d.delay = d.clamp(time.Duration(secs / (1 + d.cfg.Increase*secs) * float64(time.Second)))
}

func (d *DAC) clamp(x time.Duration) time.Duration { return min(max(x, d.cfg.Min), d.cfg.Max) }
