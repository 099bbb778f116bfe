package stage

import (
	"strings"
	"testing"
)

// FuzzCheckName: staging file and batch names: no panic; an accepted name
// has no "..", no NUL, is relative and at most MaxName bytes.
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
		if strings.Contains(name, "..") || strings.ContainsRune(name, 0) || strings.HasPrefix(name, "/") || len(name) > MaxName || name == "" {
			t.Fatalf("checkName accepted %q", name)
		}
	})
}
