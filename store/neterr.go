package store

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"syscall"

	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// transportError classifies a request of a network backend that failed
// before any answer of the store's: a wrong scheme or TLS setup (ErrInvalid),
// a limit of this machine (ErrLocal) or no connection (ErrUnreachable), each
// in one line naming at, the endpoint. It is nil for any other error.
func transportError(at, caVar string, err error) error {
	if why, ok := misconfigured(err, caVar); ok {
		return shortError{msg: fmt.Sprintf("%s: %s", at, why), err: fmt.Errorf("%w: %w", ErrInvalid, err)}
	}
	if localLimit(err) {
		return shortError{msg: fmt.Sprintf("no request sent to %s: %s; raise the open-file limit (ulimit -n, LimitNOFILE=)", at, errText(err)),
			err: fmt.Errorf("%w: %w", ErrLocal, err)}
	}
	if why, ok := unreachable(err); ok {
		return shortError{msg: fmt.Sprintf("cannot reach %s: %s", at, why), err: fmt.Errorf("%w: %w", ErrUnreachable, err)}
	}
	return nil
}

// errText is err's text fit for a message: its first line (some SDK
// errors run to paragraphs), every URL in it redacted (redactText). Every
// message that quotes a request error's text takes it from here.
func errText(err error) string {
	return redactText(firstLine(err))
}

// unreachable tells an error where no request got an answer (refused,
// no route, no such host, TLS to a plain port, a timeout) or a connection
// was lost while a body was read, and names the cause without the SDK's
// wrapping: the innermost network error's text, redacted.
func unreachable(err error) (string, bool) {
	why, ok := unreachableCause(err)
	return redactText(why), ok
}

func unreachableCause(err error) (string, bool) {
	var se *smithyhttp.RequestSendError
	var ne net.Error
	if !errors.As(err, &se) && !errors.As(err, &ne) {
		return "", false
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.Error(), true
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Error(), true
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error(), true
	}
	if se == nil {
		return ne.Error(), true
	}
	return se.Err.Error(), true
}

// misconfigured tells an error that retrying cannot cure because the
// endpoint's scheme or TLS setup is wrong (an https:// endpoint on a plain
// HTTP server, a certificate nobody here trusts), and says what to fix;
// caVar is the variable that gives the backend's client a CA bundle.
func misconfigured(err error, caVar string) (string, bool) {
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	switch {
	case errors.Is(err, http.ErrSchemeMismatch):
		return "the server speaks plain HTTP, not HTTPS; use an http:// endpoint= (or enable TLS on the server)", true
	case errors.As(err, &unknownCA):
		return "its TLS certificate is signed by an authority this machine does not trust; give the CA's certificate in " + caVar, true
	case errors.As(err, &badHost):
		return fmt.Sprintf("its TLS certificate does not name this host (%s); fix the host in endpoint=", redactText(badHost.Error())), true
	}
	return "", false
}

// localLimit tells a request that failed on a limit of this process or
// machine (no file descriptor left for a socket) before reaching the
// store: not a store outage, and it must not be reported as one.
func localLimit(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
