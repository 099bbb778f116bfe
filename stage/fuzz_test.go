package stage

import (
	"strings"
	"testing"
)

// FuzzCheckName: staging file names: no panic; an accepted name has no
// ".." (or "." or empty) element, no NUL, is relative, has no element over
// 255 bytes and is at most 4,096 bytes (docs/FORMAT.md).
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"rank-0/f.bin", "../../etc/passwd", "/abs", "a\x00b", "a/./b", strings.Repeat("n", 300), "sub/dir/x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if err := checkName(name); err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("checkName(%q): a multi-line error", name)
			}
			return
		}
		if strings.ContainsRune(name, 0) || strings.HasPrefix(name, "/") || len(name) > 4096 || name == "" {
			t.Fatalf("checkName accepted %q", name)
		}
		for _, el := range strings.Split(name, "/") {
			if el == ".." || el == "." || el == "" || len(el) > 255 {
				t.Fatalf("checkName accepted %q (element %q)", name, el)
			}
		}
	})
}
