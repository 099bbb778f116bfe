package store

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
)

// FuzzRedact: whatever a store URL holds, Redact never panics and never
// lets through a password or the value of a query parameter it does not
// know (where users put secrets).
func FuzzRedact(f *testing.F) {
	for _, s := range []string{
		"s3://AKIA:secret@bucket/p?endpoint=http://127.0.0.1:9000&region=us-east-1",
		"s3://bucket/p?token=hunter2", "az://c/p?account=devstoreaccount1:KEYKEYKEYKEY", "az://c/p?account=acct&account=DefaultEndpointsProtocol", "s3://b/p?endpoint=http://AKIA:SuperSecret@127.0.0.1:1", "file:///data", "mem://x", "%zz", "s3://b/p?endpoint=%", "://", "s3:opaque?x=1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		shown := Redact(raw)
		u, err := url.Parse(raw)
		if err != nil {
			if shown != "(unparsable URL)" {
				t.Fatalf("Redact(%q) = %q for an unparsable URL", raw, shown)
			}
			return
		}
		if p, set := u.User.Password(); set && len(p) >= 4 && strings.Contains(shown, p) && !strings.Contains(strings.ReplaceAll(raw, p, ""), p) {
			t.Fatalf("Redact(%q) = %q shows the password", raw, shown)
		}
		for k, vs := range u.Query() {
			switch k {
			case "endpoint":
				for _, v := range vs {
					e, err := url.Parse(v)
					if err != nil {
						continue
					}
					if p, set := e.User.Password(); set && len(p) >= 4 && strings.Contains(shown, url.QueryEscape(p)) && !strings.Contains(strings.ReplaceAll(raw, p, ""), p) {
						t.Fatalf("Redact(%q) = %q shows the endpoint's password", raw, shown)
					}
				}
				continue
			case "region", "path-style", "part-size":
				continue
			case "account":
				// A valid account name is shown; anything else may be a
				// key or a connection string (issue 55 item 10).
				if len(vs) == 1 && checkAzureAccount(vs[0]) == nil {
					continue
				}
			}
			for _, v := range vs {
				if len(v) >= 8 && strings.Contains(shown, url.QueryEscape(v)) && v != "xxxxx" && !strings.Contains("xxxxx", v) {
					t.Fatalf("Redact(%q) = %q shows the value of %q", raw, shown, k)
				}
			}
		}
	})
}

// FuzzRedactText: a secret in the query or the user info of a URL inside
// any text never survives redactText, whatever surrounds it.
func FuzzRedactText(f *testing.F) {
	f.Add("Get \"", "http", "acct.blob.core.windows.net/c/k", "sig=TOPSECRET", "\": EOF")
	f.Add("", "https", "u:PASSWORD@h:1/p", "", " end")
	f.Add("x://", "s3", "h", "%zz", "?y")
	f.Fuzz(func(t *testing.T, before, scheme, rest, query, after string) {
		msg := before + scheme + "://" + rest
		secret, kept := query, before+scheme+after+rest
		if query != "" {
			msg += "?" + query
		} else if at := strings.LastIndexByte(rest, '@'); at > 0 {
			secret, kept = rest[:at], before+scheme+after+rest[at:] // the user info
		}
		msg += after
		if len(secret) < 4 || strings.ContainsAny(secret+rest, " \t\r\n\"'`<>") || strings.Contains(secret+rest, "://") ||
			after != "" && !strings.ContainsAny(after[:1], " \t\r\n\"'`<>") || // after would run on in the URL
			strings.Contains(kept, secret) || strings.Contains("xxxxx", secret) {
			return // the URL would end early, or the text shows the secret where it may
		}
		if query == "" && strings.ContainsAny(rest, "?#") {
			return
		}
		if got := redactText(msg); strings.Contains(got, secret) {
			t.Fatalf("redactText(%q) = %q shows %q", msg, got, secret)
		}
	})
}

// FuzzOpen: Open refuses a bad URL with ErrInvalid and one line, never
// panics. Only mem:// and unknown schemes are opened: s3:// would dial
// whatever endpoint the fuzzer writes and file:// creates directories.
func FuzzOpen(f *testing.F) {
	for _, s := range []string{"mem://a", "mem://", "mem:///x", "ftp://x", "", "%", "mem://u:p@x", "s3://b", "file:relative"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err == nil && (u.Scheme == "s3" || u.Scheme == "file") {
			return
		}
		s, err := Open(context.Background(), raw)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Open(%q): %v; want one line wrapping ErrInvalid", raw, err)
			}
			return
		}
		if s == nil {
			t.Fatalf("Open(%q): nil store and no error", raw)
		}
	})
}

// FuzzValidateKey: no panic; an accepted key has no "..", "//" or leading
// slash.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"a/b", "../x", "/abs", "a//b", "", "a\x00b", strings.Repeat("k", 2000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if ValidateKey(key) != nil {
			return
		}
		for el := range strings.SplitSeq(key, "/") {
			if el == ".." || el == "" {
				t.Fatalf("ValidateKey accepted %q", key)
			}
		}
	})
}
