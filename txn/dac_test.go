package txn_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lakestream/lakestream/txn"
)

// inJitter reports whether got is within [base*f*(1-j), base*f*(1+j)],
// allowing a nanosecond for the float -> Duration truncation.
func inJitter(got, base time.Duration, f, j float64) bool {
	lo := time.Duration(float64(base)*f*(1-j)) - 1
	hi := time.Duration(float64(base)*f*(1+j)) + 1
	return got >= lo && got <= hi
}

// TestDACBounds: whatever the sequence of outcomes, the delay stays within
// [Min, Max], and long runs of either outcome reach the bound.
func TestDACBounds(t *testing.T) {
	cfg := txn.DACConfig{Min: 2 * time.Millisecond, Max: 300 * time.Millisecond, Seed: 1}
	d := txn.NewDAC(cfg)
	if d.Delay() != cfg.Min {
		t.Fatalf("initial delay %v, want Min %v", d.Delay(), cfg.Min)
	}
	check := func(what string) {
		t.Helper()
		if got := d.Delay(); got < cfg.Min || got > cfg.Max {
			t.Fatalf("after %s: delay %v outside [%v, %v]", what, got, cfg.Min, cfg.Max)
		}
	}
	for range 50 {
		d.Conflict()
		check("conflict")
	}
	if d.Delay() != cfg.Max {
		t.Fatalf("after 50 conflicts the delay is %v, want Max %v", d.Delay(), cfg.Max)
	}
	for range 10_000 {
		d.Success()
		check("success")
	}
	if d.Delay() != cfg.Min {
		t.Fatalf("after 10000 successes the delay is %v, want Min %v", d.Delay(), cfg.Min)
	}
	// A pseudo-random mix, biased both ways in turn.
	x := uint64(12345)
	for i := range 20_000 {
		x = x*6364136223846793005 + 1442695040888963407
		conflictShare := uint64(20 + 60*((i/1000)%2)) // 20% or 80% conflicts
		if (x>>33)%100 < conflictShare {
			d.Conflict()
			check("conflict")
		} else {
			d.Success()
			check("success")
		}
	}
}

// TestDACConflictMultiplies: a conflict multiplies max(delay, Initial) by
// Factor, scaled by a jitter factor in [1-J, 1+J].
func TestDACConflictMultiplies(t *testing.T) {
	for _, cfg := range []txn.DACConfig{
		{}, // defaults: Initial 5ms, Factor 2, Jitter 0.5
		{Initial: 10 * time.Millisecond, Factor: 3, Jitter: 0.2},
		{Min: 20 * time.Millisecond, Initial: 5 * time.Millisecond, Factor: 1.5, Jitter: 0.1},
	} {
		initial, factor, jitter := cfg.Initial, cfg.Factor, cfg.Jitter
		if initial == 0 {
			initial, factor, jitter = 5*time.Millisecond, 2, 0.5
		}
		cfg.Max = time.Hour // keep the clamp out of the way
		for seed := uint64(1); seed <= 200; seed++ {
			cfg.Seed = seed
			d := txn.NewDAC(cfg)
			for i := range 8 {
				base := max(d.Delay(), initial)
				d.Conflict()
				if got := d.Delay(); !inJitter(got, base, factor, jitter) {
					t.Fatalf("cfg %+v conflict %d: delay %v from base %v, want within [%v, %v]", cfg, i, got, base,
						time.Duration(float64(base)*factor*(1-jitter)), time.Duration(float64(base)*factor*(1+jitter)))
				}
			}
		}
	}
}

// TestDACJitterVaries: the jitter is drawn, not fixed: different seeds give
// different delays after one conflict, successive draws of one controller
// differ, and the draws spread over most of the jitter range.
func TestDACJitterVaries(t *testing.T) {
	const factor, jitter = 2.0, 0.5
	initial := 5 * time.Millisecond
	firsts := map[time.Duration]bool{}
	lo, hi := 2.0, 0.0 // observed range of the jitter factor
	for seed := uint64(1); seed <= 100; seed++ {
		d := txn.NewDAC(txn.DACConfig{Seed: seed, Max: time.Hour})
		d.Conflict()
		firsts[d.Delay()] = true
		scale := float64(d.Delay()) / float64(initial) / factor
		lo, hi = min(lo, scale), max(hi, scale)
	}
	if len(firsts) < 90 {
		t.Errorf("100 seeds gave only %d distinct delays after one conflict", len(firsts))
	}
	if lo > 1-jitter/2 || hi < 1+jitter/2 {
		t.Errorf("jitter factors over 100 seeds span only [%.3f, %.3f] of [%.1f, %.1f]", lo, hi, 1-jitter, 1+jitter)
	}

	// One controller: the ratio of successive delays changes.
	d := txn.NewDAC(txn.DACConfig{Seed: 7, Max: time.Hour})
	d.Conflict()
	ratios := map[float64]bool{}
	for range 10 {
		prev := d.Delay()
		d.Conflict()
		ratios[float64(d.Delay())/float64(prev)] = true
	}
	if len(ratios) < 9 {
		t.Errorf("10 successive conflicts gave only %d distinct growth factors", len(ratios))
	}

	// Same seed, same sequence: runs are repeatable.
	a, b := txn.NewDAC(txn.DACConfig{Seed: 42}), txn.NewDAC(txn.DACConfig{Seed: 42})
	for i := range 20 {
		a.Conflict()
		b.Conflict()
		if a.Delay() != b.Delay() {
			t.Fatalf("seed 42 draw %d: %v and %v", i, a.Delay(), b.Delay())
		}
	}
}

// TestDACSuccessAddsToRate: a success adds Increase to the attempt rate
// 1/delay, that is delay' = d/(1+Increase*d); k successes add k*Increase.
func TestDACSuccessAddsToRate(t *testing.T) {
	for _, inc := range []float64{0, 4, 25} { // 0: the default, 10
		want := inc
		if want == 0 {
			want = 10
		}
		// One conflict from Initial 1s puts the delay in [1s, 3s].
		d := txn.NewDAC(txn.DACConfig{Increase: inc, Initial: time.Second, Max: time.Hour, Seed: 3})
		d.Conflict()
		rate := 1 / d.Delay().Seconds()
		for k := 1; k <= 50; k++ {
			prev := d.Delay()
			d.Success()
			got := d.Delay()
			secs := prev.Seconds()
			exact := time.Duration(secs / (1 + want*secs) * float64(time.Second))
			if diff := got - exact; diff < -time.Nanosecond || diff > time.Nanosecond {
				t.Fatalf("increase %v success %d: delay %v -> %v, want %v", want, k, prev, got, exact)
			}
			// The rate rose by Increase. Storing the delay in whole
			// nanoseconds perturbs the rate by about rate^2 * 1ns, here
			// below 1e-4 of Increase.
			if step := 1/got.Seconds() - 1/secs; step < want*(1-1e-3) || step > want*(1+1e-3) {
				t.Fatalf("increase %v success %d: rate %.4f/s -> %.4f/s, a step of %.4f", want, k, 1/secs, 1/got.Seconds(), step)
			}
			rate += want
			if r := 1 / got.Seconds(); r < rate*(1-1e-4) || r > rate*(1+1e-4) {
				t.Fatalf("increase %v after %d successes: rate %.4f/s, want %.4f/s", want, k, r, rate)
			}
		}
	}
}

// TestDACSuccessAtZero: with Min 0 a controller that never lost a race has
// delay 0 and stays there (the rate is already unbounded); a success never
// takes the delay below a non-zero Min.
func TestDACSuccessAtZero(t *testing.T) {
	d := txn.NewDAC(txn.DACConfig{Seed: 1})
	if d.Delay() != 0 {
		t.Fatalf("initial delay %v, want 0", d.Delay())
	}
	for range 5 {
		d.Success()
		if d.Delay() != 0 {
			t.Fatalf("success at delay 0 gave %v", d.Delay())
		}
	}
	d = txn.NewDAC(txn.DACConfig{Seed: 1, Min: 50 * time.Millisecond, Increase: 1000})
	d.Conflict()
	d.Success()
	if d.Delay() != 50*time.Millisecond {
		t.Fatalf("a success took the delay to %v, below Min 50ms", d.Delay())
	}
}

func TestDACDefaults(t *testing.T) {
	d := txn.NewDAC(txn.DACConfig{})
	if d.Name() != "dac" || d.MaxGroup() != txn.DefaultMaxGroup {
		t.Fatalf("name %q max group %d", d.Name(), d.MaxGroup())
	}
	if d.Delay() != 0 {
		t.Fatalf("initial delay %v", d.Delay())
	}
	if got := txn.NewDAC(txn.DACConfig{MaxGroup: 7}).MaxGroup(); got != 7 {
		t.Fatalf("MaxGroup 7 gave %d", got)
	}
	// Max defaults to 1s.
	for range 100 {
		d.Conflict()
	}
	if d.Delay() != time.Second {
		t.Fatalf("after 100 conflicts the default controller waits %v, want 1s", d.Delay())
	}
}

func TestNewStrategy(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		maxGroup   int
		delay      bool // a positive delay between attempts
	}{
		{"", "dac", txn.DefaultMaxGroup, false},
		{"dac", "dac", txn.DefaultMaxGroup, false},
		{"naive", "naive", 1, false},
		{"fixed", "fixed", txn.DefaultMaxGroup, true},
	} {
		s, err := txn.NewStrategy(tc.name)
		if err != nil {
			t.Fatalf("NewStrategy(%q): %v", tc.name, err)
		}
		if s.Name() != tc.want || s.MaxGroup() != tc.maxGroup || (s.Delay() > 0) != tc.delay {
			t.Errorf("NewStrategy(%q): name %q max group %d delay %v; want %q, %d, positive delay %v",
				tc.name, s.Name(), s.MaxGroup(), s.Delay(), tc.want, tc.maxGroup, tc.delay)
		}
		// naive and fixed do not adapt.
		if tc.want != "dac" {
			before := s.Delay()
			s.Conflict()
			s.Success()
			if s.Delay() != before {
				t.Errorf("%s: delay changed from %v to %v", tc.want, before, s.Delay())
			}
		}
	}
	for _, name := range []string{"DAC", "aimd", "naive ", "x"} {
		s, err := txn.NewStrategy(name)
		if err == nil {
			t.Errorf("NewStrategy(%q) = %s, want an error", name, s.Name())
			continue
		}
		if !strings.Contains(err.Error(), "dac, naive or fixed") {
			t.Errorf("NewStrategy(%q) error %q does not name the choices", name, err)
		}
	}
}

// TestDACFairShareFloor: a producer that sees other writers' versions
// between its own paces itself at (writers-1) round trips, so a writer that
// never loses a race still makes room; a lone writer is not slowed.
func TestDACFairShareFloor(t *testing.T) {
	d := txn.NewDAC(txn.DACConfig{Seed: 1})
	for range 50 {
		d.Committed(10*time.Millisecond, 0)
	}
	if got := d.Delay(); got != 0 {
		t.Fatalf("a lone writer is paced at %v", got)
	}
	for range 50 {
		d.Committed(10*time.Millisecond, 7) // 8 writers share the log
	}
	if got := d.Delay(); got < 65*time.Millisecond || got > 70*time.Millisecond {
		t.Fatalf("8 writers, 10 ms round trips: delay %v, want about 70ms", got)
	}
	for range 50 {
		d.Committed(time.Second, 100)
	}
	if got := d.Delay(); got != time.Second {
		t.Fatalf("the floor is not clamped to Max: %v", got)
	}
	var _ txn.Pacer = d
}
