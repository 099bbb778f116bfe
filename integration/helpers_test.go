package integration

// The helpers every kind of integration test shares: one of each. Helpers
// that belong to one kind of test (a mount's, a producer's) keep their
// prefix and live beside those tests.

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/listen"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// within polls cond until it holds or d passes and reports whether it
// held. A test that fails with its own message uses it; waitFor fails
// with a generic one.
func within(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// waitFor fails t unless cond holds within d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !within(d, cond) {
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// testLogger writes slog output at level and above through t.Log, shown
// only on failure or with -v.
func testLogger(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: level}))
}

// tWriter writes each line through t.Log.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newStream creates a stream at url.
func newStream(t testing.TB, url string, o txn.CreateOptions) *txn.Log {
	t.Helper()
	s, err := store.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	l, err := txn.Create(t.Context(), s, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// freeAddr is 127.0.0.1:PORT for a port free when asked.
func freeAddr(t testing.TB) string {
	t.Helper()
	a, err := listen.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// fetchMetrics is the page addr/metrics serves.
func fetchMetrics(addr string) (string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	return string(b), err
}

// scrape is the page addr/metrics serves, failing t if it cannot be read.
func scrape(t testing.TB, addr string) string {
	t.Helper()
	page, err := fetchMetrics(addr)
	if err != nil {
		t.Fatalf("scraping %s: %v", addr, err)
	}
	return page
}

// scrapeValues is the value of each unlabelled metric addr/metrics serves.
func scrapeValues(t testing.TB, addr string) map[string]float64 {
	t.Helper()
	m := map[string]float64{}
	for _, line := range strings.Split(scrape(t, addr), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && !strings.HasPrefix(f[0], "#") {
			v, _ := strconv.ParseFloat(f[1], 64)
			m[f[0]] = v
		}
	}
	return m
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}
