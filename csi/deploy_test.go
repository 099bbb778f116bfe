package csi

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/lakestream/lakestream/mount"
)

// deployDir is the repository's deploy/kubernetes.
func deployDir(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "deploy", "kubernetes")
}

// helmBinary finds helm: $LAKEFS_TOOLS/bin, the repository's .tools/bin,
// then PATH. Missing, the test fails (make tools-all installs it), or
// under -short (make test) is skipped.
func helmBinary(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dirs := []string{filepath.Join(filepath.Dir(file), "..", ".tools", "bin")}
	if d := os.Getenv("LAKEFS_TOOLS"); d != "" {
		dirs = append([]string{filepath.Join(d, "bin")}, dirs...)
	}
	for _, d := range dirs {
		if p := filepath.Join(d, "helm"); fileExists(p) {
			return p
		}
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if testing.Short() {
		// make test does not install helm (it builds for minutes); make
		// test-all does, and fails here without it.
		t.Skip("helm not found: make test-all installs it and runs this test")
	}
	t.Fatal("helm not found; install it with make tools-all")
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestManifestsRendered: the committed plain manifests are exactly what
// the Helm chart renders with its defaults (helm lint --strict passes).
func TestManifestsRendered(t *testing.T) {
	helm := helmBinary(t)
	chart := filepath.Join(deployDir(t), "chart", "lakestream-csi")
	if out, err := exec.Command(helm, "lint", "--strict", chart).CombinedOutput(); err != nil {
		t.Fatalf("helm lint --strict: %v\n%s", err, out)
	}
	got, err := exec.Command(helm, "template", "lakestream-csi", chart, "--namespace", "kube-system").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	want, err := os.ReadFile(filepath.Join(deployDir(t), "manifests", "lakestream-csi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("deploy/kubernetes/manifests/lakestream-csi.yaml differs from the chart; regenerate it: " +
			".tools/bin/helm template lakestream-csi deploy/kubernetes/chart/lakestream-csi --namespace kube-system > deploy/kubernetes/manifests/lakestream-csi.yaml")
	}
}

// TestManifestsMatchDriver: the manifests name the driver, socket and
// state directory the code uses, pass only flags the binaries accept,
// and the examples use the driver's name, real lakefs-mount options as
// attributes and only the secret keys the driver takes.
func TestManifestsMatchDriver(t *testing.T) {
	_, produceBin, csiBin := bins(t)
	docs := yamlDocs(t, filepath.Join(deployDir(t), "manifests", "lakestream-csi.yaml"))
	drv := findKind(t, docs, "CSIDriver")
	if get(drv, "metadata", "name") != DriverName || get(drv, "spec", "attachRequired") != false {
		t.Fatalf("CSIDriver: name %v, attachRequired %v; want %s, false", get(drv, "metadata", "name"), get(drv, "spec", "attachRequired"), DriverName)
	}
	modes := get(drv, "spec", "volumeLifecycleModes")
	if !containsAll(modes, "Persistent", "Ephemeral") {
		t.Fatalf("CSIDriver volumeLifecycleModes %v, want Persistent and Ephemeral", modes)
	}
	ds := findKind(t, docs, "DaemonSet")
	pod := get(ds, "spec", "template", "spec")
	plugin := container(t, pod, "lakefs-csi")
	sock, _ := socketPath(DefaultEndpoint)
	pluginDir := "/var/lib/kubelet/plugins/" + DriverName
	checkEnv(t, plugin, "CSI_ENDPOINT", DefaultEndpoint)
	checkArgs(t, plugin, csiBin, "--state-dir="+DefaultStateDir)
	checkArgs(t, container(t, pod, "node-driver-registrar"), "",
		"--csi-address="+sock, "--kubelet-registration-path="+pluginDir+"/csi.sock")
	checkArgs(t, container(t, pod, "liveness-probe"), "", "--csi-address="+sock)
	for vol, path := range map[string]string{"plugin-dir": pluginDir, "state-dir": DefaultStateDir} {
		if got := hostPath(pod, vol); got != path {
			t.Errorf("volume %s is hostPath %q, want %q", vol, got, path)
		}
	}
	for _, m := range list(get(plugin, "volumeMounts")) {
		if name := get(m, "name"); (name == "kubelet-dir" || name == "state-dir") && get(m, "mountPropagation") != "Bidirectional" {
			t.Errorf("volume mount %v of lakefs-csi lacks mountPropagation: Bidirectional", name)
		}
		if get(m, "name") == "plugin-dir" && get(m, "mountPath") != filepath.Dir(sock) {
			t.Errorf("plugin-dir is mounted at %v, want %s (the socket's directory)", get(m, "mountPath"), filepath.Dir(sock))
		}
	}
	checkExamples(t, produceBin)
}

// checkExamples checks every CSI volume and secret of the examples.
func checkExamples(t *testing.T, produceBin string) {
	options := volumeOptions()
	files, _ := filepath.Glob(filepath.Join(deployDir(t), "examples", "*.yaml"))
	if len(files) < 4 {
		t.Fatalf("%d examples, want at least 4 (inline, static PV, non-root, producer)", len(files))
	}
	volumes := 0
	for _, f := range files {
		for _, d := range yamlDocs(t, f) {
			for _, v := range csiVolumes(d) {
				volumes++
				if get(v, "driver") != DriverName {
					t.Errorf("%s: a CSI volume names driver %v, want %s", f, get(v, "driver"), DriverName)
				}
				attrs, _ := get(v, "volumeAttributes").(map[string]any)
				for k := range attrs {
					if slices.Contains(driverAttrs, k) || !slices.Contains(options, k) {
						t.Errorf("%s: volume attribute %q is not a lakefs-mount option a volume may set", f, k)
					}
				}
			}
			if get(d, "kind") == "Secret" {
				data, _ := get(d, "stringData").(map[string]any)
				for k := range data {
					if !slices.Contains(secretKeys, k) {
						t.Errorf("%s: secret key %q is not one the driver takes (%v)", f, k, secretKeys)
					}
				}
			}
			if get(d, "kind") == "Deployment" {
				checkArgs(t, container(t, get(d, "spec", "template", "spec"), "produce"), produceBin+" run")
			}
		}
	}
	if volumes < 3 {
		t.Errorf("the examples have %d CSI volumes, want at least 3", volumes)
	}
}

func yamlDocs(t *testing.T, path string) []any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var docs []any
	dec := yaml.NewDecoder(f)
	for {
		var d any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
}

// get walks maps by key; nil where a key is missing.
func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func list(v any) []any { l, _ := v.([]any); return l }

func containsAll(v any, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(list(v), any(w)) {
			return false
		}
	}
	return true
}

func findKind(t *testing.T, docs []any, kind string) any {
	t.Helper()
	for _, d := range docs {
		if get(d, "kind") == kind {
			return d
		}
	}
	t.Fatalf("no %s in the manifests", kind)
	return nil
}

func container(t *testing.T, pod any, name string) any {
	t.Helper()
	for _, c := range list(get(pod, "containers")) {
		if get(c, "name") == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return nil
}

func hostPath(pod any, volume string) any {
	for _, v := range list(get(pod, "volumes")) {
		if get(v, "name") == volume {
			return get(v, "hostPath", "path")
		}
	}
	return nil
}

func checkEnv(t *testing.T, c any, name, want string) {
	t.Helper()
	for _, e := range list(get(c, "env")) {
		if get(e, "name") == name {
			if get(e, "value") != want {
				t.Errorf("container %v: %s=%v, want %s", get(c, "name"), name, get(e, "value"), want)
			}
			return
		}
	}
	t.Errorf("container %v does not set %s", get(c, "name"), name)
}

// checkArgs: c's args include want; with bin (a command and subcommand),
// each --flag of its args and command is one bin's --help lists.
func checkArgs(t *testing.T, c any, bin string, want ...string) {
	t.Helper()
	var args []string
	for _, a := range append(list(get(c, "command")), list(get(c, "args"))...) {
		args = append(args, a.(string))
	}
	for _, w := range want {
		if !slices.Contains(args, w) {
			t.Errorf("container %v: args %v lack %s", get(c, "name"), args, w)
		}
	}
	if bin == "" {
		return
	}
	help := helpOf(t, strings.Fields(bin)...)
	for _, a := range args {
		if flag, _, _ := strings.Cut(a, "="); strings.HasPrefix(flag, "--") && !strings.Contains(help, flag+" ") {
			t.Errorf("container %v: %s is not a flag of %s", get(c, "name"), flag, filepath.Base(bin))
		}
	}
}

func helpOf(t *testing.T, cmd ...string) string {
	t.Helper()
	out, err := exec.Command(cmd[0], append(cmd[1:], "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v --help: %v\n%s", cmd, err, out)
	}
	return string(out)
}

// csiVolumes returns the csi sections of a pod's (or a workload's pod
// template's) volumes and of a PersistentVolume.
func csiVolumes(d any) []any {
	var out []any
	if v := get(d, "spec", "csi"); v != nil {
		out = append(out, v)
	}
	for _, pod := range []any{get(d, "spec"), get(d, "spec", "template", "spec")} {
		for _, v := range list(get(pod, "volumes")) {
			if c := get(v, "csi"); c != nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// TestDocsAttributes: the volume attribute table of docs/KUBERNETES.md
// lists exactly the options of lakefs-mount's option table a volume may
// set (and the driver's own consumer), and the text names each option the
// driver sets or refuses.
func TestDocsAttributes(t *testing.T) {
	flags := volumeOptions()
	doc, err := os.ReadFile(filepath.Join(deployDir(t), "..", "..", "docs", "KUBERNETES.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "## Volume attributes")
	section, _, _ = strings.Cut(section, "\n## ")
	var rows []string
	for _, line := range strings.Split(section, "\n") {
		if name, ok := strings.CutPrefix(line, "| `"); ok {
			name, _, _ = strings.Cut(name, "`")
			rows = append(rows, name)
		}
	}
	for _, f := range flags {
		switch {
		case slices.Contains(driverAttrs, f):
			if !strings.Contains(section, "`"+f+"`") || slices.Contains(rows, f) {
				t.Errorf("docs/KUBERNETES.md: %q is set or refused by the driver: name it in the text, not in the table", f)
			}
		case !slices.Contains(rows, f):
			t.Errorf("docs/KUBERNETES.md: the attribute table lacks lakefs-mount's --%s", f)
		}
	}
	for _, r := range rows {
		if r == consumerAttr {
			continue // the driver's own attribute
		}
		if !slices.Contains(flags, r) || slices.Contains(driverAttrs, r) {
			t.Errorf("docs/KUBERNETES.md: the table lists %q, which is not a volume option of lakefs-mount", r)
		}
	}
}

// volumeOptions are the names of lakefs-mount's options that are volume
// attributes (the option table's, hidden ones aside).
func volumeOptions() []string {
	var names []string
	for _, op := range mount.OptionTable() {
		if !op.Hidden {
			names = append(names, op.Name)
		}
	}
	return names
}
