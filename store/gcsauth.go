package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"cloud.google.com/go/auth"
	"golang.org/x/oauth2"
)

// A GCS request sent with credentials first fetches an OAuth token from
// the token endpoint (the key's token_uri, or the metadata server), then
// goes to the storage endpoint. Both failures reach the SDK as one error
// of the storage request, so the transport tells them apart: a request
// that never got past the authorization layer to the transport below it
// failed on its token. A refused key (400 invalid_grant) is then a
// credentials error, which waiting cannot cure, and an unreachable token
// endpoint is named as such, not as the storage endpoint.

// tokenError is a request that failed while its token was fetched.
type tokenError struct{ err error }

func (e *tokenError) Error() string { return "fetching an OAuth token: " + e.err.Error() }
func (e *tokenError) Unwrap() error { return e.err }

type sentKey struct{}

// sentTransport is below the authorization layer: it marks a request
// that got a token and was sent.
type sentTransport struct{ rt http.RoundTripper }

func (t sentTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if sent, ok := req.Context().Value(sentKey{}).(*atomic.Bool); ok {
		sent.Store(true)
	}
	return t.rt.RoundTrip(req)
}

// authTransport is above it: a request that failed unmarked failed on its
// token, and its error says so (tokenError).
type authTransport struct{ rt http.RoundTripper }

func (t authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := new(atomic.Bool)
	resp, err := t.rt.RoundTrip(req.WithContext(context.WithValue(req.Context(), sentKey{}, sent)))
	if err != nil && !sent.Load() {
		err = &tokenError{err: err}
	}
	return resp, err
}

// tokenFailure classifies a request error that is a failed token fetch,
// in one line naming the token endpoint and the credential source; nil
// for any other error. An answer 4xx is ErrCredentials (the key is
// revoked, expired or wrong: never transient), 429 and 5xx
// ErrUnavailable, no answer ErrUnreachable.
func (s *gcsStore) tokenFailure(err error) error {
	var te *tokenError
	if !errors.As(err, &te) {
		return nil
	}
	resp, code := tokenAnswer(te.err)
	at := "the token endpoint"
	switch {
	case resp != nil && resp.Request != nil && resp.Request.URL != nil:
		at += " " + redactURLText(resp.Request.URL.String())
	default:
		var ue *url.Error
		if errors.As(te.err, &ue) {
			at += " " + redactURLText(ue.URL)
		}
	}
	if resp != nil {
		answer := fmt.Sprintf("HTTP %d", resp.StatusCode)
		if code != "" {
			answer += " " + code
		}
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			return shortError{msg: fmt.Sprintf("%s cannot issue a token for gs bucket %q now (%s); it may later", at, s.name, answer),
				err: fmt.Errorf("%w: %w", ErrUnavailable, err)}
		}
		return shortError{msg: fmt.Sprintf("%s refused the credentials from %s for gs bucket %q (%s): the key is revoked, expired or wrong; %s",
			at, s.cred, s.name, answer, s.credentialFix()), err: fmt.Errorf("%w: %w", ErrCredentials, err)}
	}
	if terr := transportError(at, "SSL_CERT_FILE", te.err); terr != nil {
		if why, ok := unreachable(te.err); ok && errors.Is(terr, ErrUnreachable) {
			return shortError{msg: fmt.Sprintf("cannot reach %s for gs bucket %q (%s); check the network, and the token endpoint (token_uri) of the credentials from %s",
				at, s.name, why, s.cred), err: terr}
		}
		return terr
	}
	return shortError{msg: fmt.Sprintf("no token from %s for gs bucket %q with the credentials from %s (%s); %s",
		at, s.name, s.cred, errText(te.err), s.credentialFix()), err: fmt.Errorf("%w: %w", ErrCredentials, err)}
}

// tokenAnswer is the token endpoint's answer in err, if it answered, and
// the OAuth error code it gave ("invalid_grant"). The oauth2 package and
// the newer auth package each have their error type; the SDK gives one
// or the other by how the credentials were found.
func tokenAnswer(err error) (*http.Response, string) {
	var body []byte
	var resp *http.Response
	var re *oauth2.RetrieveError
	var ae *auth.Error
	switch {
	case errors.As(err, &re) && re.Response != nil:
		if re.ErrorCode != "" {
			return re.Response, re.ErrorCode
		}
		resp, body = re.Response, re.Body
	case errors.As(err, &ae) && ae.Response != nil:
		resp, body = ae.Response, ae.Body
	default:
		return nil, ""
	}
	var answer struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(body, &answer) // a body of another form names no code
	return resp, answer.Error
}

// credentialFix says how to fix the credential source that was refused.
func (s *gcsStore) credentialFix() string {
	switch {
	case s.cred == gcsKeyEnv:
		return "put a current service-account key (gcloud iam service-accounts keys create) in " + gcsKeyEnv
	case strings.HasPrefix(s.cred, "GOOGLE_APPLICATION_CREDENTIALS "):
		return "point GOOGLE_APPLICATION_CREDENTIALS at a current service-account key file (gcloud iam service-accounts keys create)"
	}
	return "run gcloud auth application-default login again, check the service account of this machine, or set GOOGLE_APPLICATION_CREDENTIALS to a current service-account key file"
}
