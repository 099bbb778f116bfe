// Package listen opens the metrics listeners of the commands. An address
// without a host (":9100", "9100") binds 127.0.0.1, not every interface:
// metrics leave the machine only when the operator names a host
// (0.0.0.0:9100 or an interface's address). FreeAddr picks a loopback
// address for the child processes of tests and benchmarks.
package listen

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Addr is addr with an empty host made 127.0.0.1. A port that is not a
// number from 0 to 65535 is an error: checked here, before any listen, so
// a mistyped address is refused as such and not as a failed listen.
func Addr(given string) (string, error) {
	addr := given
	if !strings.Contains(addr, ":") {
		addr = ":" + addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("metrics address %q: want HOST:PORT (e.g. 127.0.0.1:9100): %w", given, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("metrics address %q: the port %q is not a number from 0 to 65535; want HOST:PORT (e.g. 127.0.0.1:9100)", given, port)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// TCP listens on Addr(addr).
func TCP(addr string) (net.Listener, error) {
	a, err := Addr(addr)
	if err != nil {
		return nil, err
	}
	return net.Listen("tcp", a)
}

// FreeAddr is 127.0.0.1:PORT for a port free when asked, for a child
// process (a test server, a benchmark's mount) to listen on. Another
// process may take it before the child does; callers that can retry do.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
