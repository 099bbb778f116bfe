package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// taskProgress shows how far a long command (verify, gc) is, on stderr:
// stdout is its report, which scripts read. On a terminal it is one line
// rewritten at most five times a second; otherwise a line every few
// seconds. A command that ends within its first two seconds shows
// nothing.
type taskProgress struct {
	out   io.Writer
	what  string // "verify: objects checked"
	live  bool
	now   func() time.Time
	start time.Time
	quiet time.Duration // nothing before this
	every time.Duration // between lines

	mu    sync.Mutex
	last  time.Time // GUARDED_BY(mu): when a line was shown
	shown bool      // GUARDED_BY(mu): a live line is on the terminal
}

func newTaskProgress(out io.Writer, what string) *taskProgress {
	p := &taskProgress{out: out, what: what, live: isTerminal(out), now: time.Now, quiet: 2 * time.Second, every: 5 * time.Second}
	if p.live {
		p.every = 200 * time.Millisecond
	}
	p.start = p.now()
	return p
}

// update reports done of total; safe for concurrent use.
func (p *taskProgress) update(done, total int64) {
	p.show(done >= total, func(elapsed time.Duration) string {
		return fmt.Sprintf("%s %d of %d (%.0f%%), %s", p.what, done, total, 100*float64(done)/float64(max(total, 1)), elapsed)
	})
}

// show prints line's text when due: not in the first quiet period, then
// at most once per every (a last update always, once past the quiet).
func (p *taskProgress) show(last bool, line func(elapsed time.Duration) string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if now.Sub(p.start) < p.quiet || now.Sub(p.last) < p.every && !last {
		return
	}
	p.last = now
	text := line(now.Sub(p.start).Round(time.Second))
	if p.live {
		fmt.Fprintf(p.out, "\r\033[K%s", text)
		p.shown = true
		return
	}
	fmt.Fprintln(p.out, text)
}

// phase reports n items handled so far in a phase of unknown size
// (txn.GCOptions.Progress).
func (p *taskProgress) phase(phase string, n int64) {
	p.show(n < 0, func(elapsed time.Duration) string {
		return fmt.Sprintf("%s %s: %d, %s", p.what, phase, n, elapsed)
	})
}

// finish ends a live line, so the report starts on a line of its own.
func (p *taskProgress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprintln(p.out)
		p.shown = false
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
