package store

import (
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// TestS3LocalLimitIsNotAnOutage (issue 47 item 3): a request that found no
// file descriptor for its socket (EMFILE, ENFILE) is ErrLocal, naming the
// limit to raise: neither ErrUnreachable nor Transient, so a mount does
// not report its own fd limit as the store being down.
func TestS3LocalLimitIsNotAnOutage(t *testing.T) {
	s := &s3Store{endpoint: "http://127.0.0.1:9000"}
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		sent := &smithyhttp.RequestSendError{Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", errno)}}
		err := s.flatten(sent)
		if !errors.Is(err, ErrLocal) || errors.Is(err, ErrUnreachable) || Transient(err) {
			t.Fatalf("%v: classified %v (ErrLocal %v, ErrUnreachable %v, Transient %v); want ErrLocal only",
				errno, err, errors.Is(err, ErrLocal), errors.Is(err, ErrUnreachable), Transient(err))
		}
		if !errors.Is(err, errno) || !strings.Contains(err.Error(), "ulimit -n") {
			t.Fatalf("%v: %q; want the errno kept and the fix named", errno, err)
		}
	}
}
