package store

import "testing"

// Only a loopback http endpoint uploads with UNSIGNED-PAYLOAD; https and
// remote endpoints keep the body's hash in the signature.
func TestLoopbackHTTP(t *testing.T) {
	for e, want := range map[string]bool{
		"http://127.0.0.1:9000":   true,
		"http://[::1]:9000":       true,
		"http://localhost:9000":   true,
		"https://127.0.0.1:9000":  false,
		"http://10.0.0.5:9000":    false,
		"http://s3.example.com":   false,
		"":                        false,
		"http://127.0.0.1.nip.io": false,
	} {
		if got := loopbackHTTP(e); got != want {
			t.Errorf("loopbackHTTP(%q) = %v, want %v", e, got, want)
		}
	}
}
