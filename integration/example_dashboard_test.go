package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/longtest"
)

// TestDashboardMetricsExist checks that every metric docs/grafana/
// lakestream.json queries is served by a real running producer or mount.
func TestDashboardMetricsExist(t *testing.T) {
	longtest.Skip(t, "the Grafana dashboard against live metrics")
	mntRequireFUSE(t)
	produce, _ := prdBins(t)
	mountBin := mntBuildMount(t)
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "docs", "grafana", "lakestream.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana/lakestream.json: %v", err)
	}
	dir := t.TempDir()
	url := "file://" + filepath.Join(dir, "store")
	staging, mnt := filepath.Join(dir, "staging"), filepath.Join(dir, "mnt")
	for _, d := range []string{filepath.Join(dir, "store"), staging, mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	prdMust(t, produce, "init", "--store", url, "--ranks", "2")
	pa, ma := freeAddr(t), freeAddr(t)
	p, err := prdStart(produce, url, staging, "dash-0", "--metrics-addr", pa)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	mount := exStart(t, mountBin, "--store", url, "--metrics-addr", ma, mnt)
	t.Cleanup(func() { exStopMount(mount, mnt) })
	served := exMetricNames(t, pa) + exMetricNames(t, ma)
	name := regexp.MustCompile(`lakefs_[a-z_]+`)
	n := 0
	for _, pn := range dash.Panels {
		for _, tg := range pn.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				n++
				if !strings.Contains(served, "\n"+m+"\n") {
					t.Errorf("panel %q queries %s, which no producer or mount serves", pn.Title, m)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the dashboard queries no lakefs_ metric")
	}
	t.Logf("%d metric references in %d panels, all served", n, len(dash.Panels))
}

// exMetricNames is the set of metric names addr/metrics serves, one per
// line between newlines.
func exMetricNames(t testing.TB, addr string) string {
	t.Helper()
	var body string
	waitFor(t, 30*time.Second, "metrics at "+addr, func() bool {
		var err error
		body, err = fetchMetrics(addr)
		return err == nil
	})
	var sb strings.Builder
	sb.WriteString("\n")
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n := strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' })[0]
		fmt.Fprintf(&sb, "%s\n", n)
		// a histogram's series serve the name the query may use without suffix
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if s, ok := strings.CutSuffix(n, suf); ok {
				fmt.Fprintf(&sb, "%s\n", s)
			}
		}
	}
	return sb.String()
}
