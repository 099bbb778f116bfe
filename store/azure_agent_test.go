package store

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// TestAzureAppID: azcore cuts an ApplicationID to 24 characters; ours is
// cut from the version first, so that the binary's name survives.
func TestAzureAppID(t *testing.T) {
	for _, c := range []struct{ name, version, want string }{
		{"store.test", "devel", "store.test/devel"},
		{"lakefs-mount", "devel-0123456789ab", "lakefs-mount/devel-01234"},
		{"lakefs-producer-daemon", "v1.2.3", "lakefs-producer-daemon"},
		{"a-very-long-binary-name-indeed", "v1", "a-very-long-binary-name-"},
		{"with space", "v 1", "with-space/v-1"},
	} {
		got := azureAppID(c.name, c.version)
		if got != c.want || len(got) > azAppIDMax || strings.Contains(got, " ") {
			t.Errorf("azureAppID(%q, %q) = %q, want %q", c.name, c.version, got, c.want)
		}
	}
}

// TestAzureShouldRetry: our timeouts are not retried by the SDK; other
// transport failures and 5xx are.
func TestAzureShouldRetry(t *testing.T) {
	if azShouldRetry(nil, &timeoutError{what: "stalled", d: 1}) {
		t.Error("retries our idle timeout")
	}
	if azShouldRetry(nil, &net.OpError{Op: "read", Err: errTimeout{}}) {
		t.Error("retries a transport timeout")
	}
	if !azShouldRetry(nil, errors.New("connection reset")) {
		t.Error("does not retry a reset connection")
	}
}

type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }
