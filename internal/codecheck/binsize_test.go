package codecheck

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// binaryLimits is the most each binary may weigh, built as `make build`
// builds it (the Makefile's BUILD_TAGS, symbols kept), about 8% over its
// size when the limit was set (go1.26, linux/amd64). A dependency that
// grows one past it fails TestBinarySizes: look at what it brought
// (go version -m, go list -deps) before raising a limit. Without
// disable_grpc_modules the GCS SDK alone added 20 MB to each.
var binaryLimits = map[string]int64{
	"lakefs-mount":   64e6, // 59.0 MB
	"lakefs-produce": 62e6, // 57.4 MB
	"lakefs-csi":     40e6, // 36.4 MB
	"lakefs-bench":   89e6, // 82.4 MB
}

// grpcExtras are the packages disable_grpc_modules exists to leave out:
// the GCS SDK's DirectPath (xDS, envoy's control plane, RLS). An SDK
// release that ignored the tag would link them again.
var grpcExtras = []string{
	"google.golang.org/grpc/xds",
	"google.golang.org/grpc/balancer/rls",
	"github.com/envoyproxy/",
	"github.com/cncf/xds/",
}

// buildTags returns the Makefile's BUILD_TAGS and checks that the
// Dockerfile builds with the same.
func buildTags(t *testing.T, root string) string {
	t.Helper()
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^BUILD_TAGS := (\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no BUILD_TAGS := line")
	}
	tags := string(m[1])
	docker, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(docker), "-tags "+tags+" ") {
		t.Errorf("Dockerfile: its go build lacks -tags %s (the Makefile's BUILD_TAGS)", tags)
	}
	return tags
}

// TestBinarySizes: every binary, built with the Makefile's tags, is within
// its limit and links none of what the tags leave out.
func TestBinarySizes(t *testing.T) {
	root := repoRoot(t)
	tags := buildTags(t, root)
	out := t.TempDir()
	build := exec.Command("go", "build", "-tags", tags, "-o", out+"/", "./cmd/...")
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	for name, limit := range binaryLimits {
		fi, err := os.Stat(filepath.Join(out, name))
		if err != nil {
			t.Error(err)
			continue
		}
		t.Logf("%s: %.1f MB (limit %.1f MB)", name, float64(fi.Size())/1e6, float64(limit)/1e6)
		if fi.Size() > limit {
			t.Errorf("%s is %.1f MB, over its limit of %.1f MB (internal/codecheck binaryLimits): see what grew with go version -m", name, float64(fi.Size())/1e6, float64(limit)/1e6)
		}
		if problems := linked(t, root, tags, "./cmd/"+name); problems != "" {
			t.Errorf("%s links %s although -tags %s should leave it out", name, problems, tags)
		}
	}
}

// linked returns the grpcExtras packages pkg links with tags, if any.
func linked(t *testing.T, root, tags, pkg string) string {
	t.Helper()
	list := exec.Command("go", "list", "-tags", tags, "-deps", pkg)
	list.Dir = root
	b, err := list.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	var found []string
	for _, dep := range strings.Fields(string(b)) {
		for _, x := range grpcExtras {
			if strings.HasPrefix(dep, x) {
				found = append(found, dep)
			}
		}
	}
	if len(found) > 3 {
		return fmt.Sprintf("%s and %d more", strings.Join(found[:3], ", "), len(found)-3)
	}
	return strings.Join(found, ", ")
}
