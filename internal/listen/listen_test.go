package listen

import (
	"net"
	"testing"
)

// TestAddr: metrics bind loopback unless a host is named.
func TestAddr(t *testing.T) {
	for in, want := range map[string]string{
		":9100":        "127.0.0.1:9100",
		"9100":         "127.0.0.1:9100",
		":0":           "127.0.0.1:0",
		"0.0.0.0:9100": "0.0.0.0:9100",
		"10.1.2.3:80":  "10.1.2.3:80",
		"[::1]:9100":   "[::1]:9100",
	} {
		got, err := Addr(in)
		if err != nil || got != want {
			t.Errorf("Addr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"a:b:c", "[::1"} {
		if _, err := Addr(bad); err == nil {
			t.Errorf("Addr(%q): no error", bad)
		}
	}
}

// TestFreeAddr: the address is on loopback and free to listen on.
func TestFreeAddr(t *testing.T) {
	a, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	host, _, err := net.SplitHostPort(a)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("FreeAddr() = %q (%v), want 127.0.0.1:PORT", a, err)
	}
	l, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatalf("listening on FreeAddr() %s: %v", a, err)
	}
	l.Close()
}
