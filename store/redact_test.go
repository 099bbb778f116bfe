package store

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// TestRedactText: every URL in an error's text loses its query (a SAS)
// and its user info, whatever surrounds it.
func TestRedactText(t *testing.T) {
	in := `Get "https://acct.blob.core.windows.net/c/k?sv=2024&sig=SECRET%2B": EOF; also http://h/x?sig=SECRET2 end, https://u:SECRET3@h:1/p#SECRET4 and (http://h?SECRET5)`
	got := redactText(in)
	want := `Get "https://acct.blob.core.windows.net/c/k?xxxxx": EOF; also http://h/x?xxxxx end, https://xxxxx@h:1/p?xxxxx and (http://h?xxxxx`
	if got != want || strings.Contains(got, "SECRET") {
		t.Fatalf("redactText = %q, want %q", got, want)
	}
}

// TestRequestErrorsRedacted (issue 55 item 3): a request error quoting a
// URL with a SAS, however it is classified (no descriptor left, no
// connection, an error of no known kind), reaches no message with the
// SAS in it, on every backend's path: Azure's flatten, openError and
// classify, GCS's and S3's flatten.
func TestRequestErrorsRedacted(t *testing.T) {
	const secret = "TOPSECRETsignature"
	sasURL := "http://127.0.0.1:10000/devstoreaccount1/cont/p%2Fk?se=2030-01-01&sp=rwdl&sig=" + secret
	dial := func(err error) error {
		return &url.Error{Op: "Head", URL: sasURL, Err: &net.OpError{Op: "dial", Net: "tcp", Err: err}}
	}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"EMFILE", dial(os.NewSyscallError("socket", syscall.EMFILE)), ErrLocal},
		{"ENFILE", dial(os.NewSyscallError("socket", syscall.ENFILE)), ErrLocal},
		{"refused", dial(os.NewSyscallError("connect", syscall.ECONNREFUSED)), ErrUnreachable},
		{"other", &url.Error{Op: "Get", URL: sasURL, Err: errors.New("something else")}, nil},
	}
	az := &azureStore{name: "cont", endpoint: "http://127.0.0.1:10000/devstoreaccount1/", cred: "AZURE_STORAGE_SAS_TOKEN"}
	gs := &gcsStore{name: "bkt", endpoint: "http://127.0.0.1:4443"}
	s3 := &s3Store{endpoint: "http://127.0.0.1:9000", bucket: "bkt"}
	ctx := context.Background()
	for _, c := range cases {
		for path, err := range map[string]error{
			"az flatten":   az.flatten(c.err),
			"az openError": az.openError(ctx, c.err),
			"az classify":  az.classify(ctx, "get", "k", c.err),
			"az body":      (&body{rc: errReader{c.err}, c: az, ctx: ctx, op: "get", key: "k"}).read(),
			"gs flatten":   gs.flatten(c.err),
			"gs openError": gs.openError(ctx, c.err),
			"s3 flatten":   s3.flatten(&smithyhttp.RequestSendError{Err: c.err}),
			"s3 openError": openError(ctx, S3Options{Bucket: "bkt", Endpoint: s3.endpoint}, s3, &smithyhttp.RequestSendError{Err: c.err}),
		} {
			msg := err.Error()
			if strings.Contains(msg, secret) || strings.Contains(msg, "sig=") {
				t.Errorf("%s, %s: %q shows the SAS", c.name, path, msg)
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("%s, %s: %v; want %v", c.name, path, err, c.want)
			}
		}
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
func (r errReader) Close() error             { return nil }

func (b *body) read() error {
	_, err := b.Read(make([]byte, 1))
	return err
}
