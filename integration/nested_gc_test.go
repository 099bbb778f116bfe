package integration

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// TestNestedStreams (issue 47 item 1), on file:// and on a real S3 server,
// with real lakefs-produce processes: init refuses a stream inside
// another's data/, data/x or _log/, and one around an existing stream;
// and a stream that is there anyway (made by an older build or by hand)
// survives gc --grace 0s of the stream around it, whole: its
// _stream.json, log and data, and status still reads it (before, gc
// deleted all of it as orphans).
func TestNestedStreams(t *testing.T) {
	bin, _ := prdBins(t)
	backends := map[string]func(t *testing.T) string{
		"file": func(t *testing.T) string { u, _ := mntFileURL(t); return u },
		"versitygw": func(t *testing.T) string {
			srv := s3test.Start(t)
			return srv.NewBucketURL(t)
		},
	}
	for name, newURL := range backends {
		t.Run(name, func(t *testing.T) {
			base := newURL(t)
			at := func(sub string) string { return withPrefix(t, base, sub) }
			prdMust(t, bin, "init", "--store", at("fx"), "--ranks", "1")
			for _, sub := range []string{"fx/data", "fx/data/x", "fx/_log/x"} {
				_, stderr, code := prdExec(t, bin, "init", "--store", at(sub), "--ranks", "1")
				if code != 2 || !strings.Contains(stderr, "lies in the") {
					t.Errorf("init at %s inside the stream at fx: exit %d, %q; want a usage error naming it", sub, code, stderr)
				}
			}
			prdMust(t, bin, "init", "--store", at("gx/data/x"), "--ranks", "1")
			if _, stderr, code := prdExec(t, bin, "init", "--store", at("gx"), "--ranks", "1"); code != 2 || !strings.Contains(stderr, "would hold the stream at its data/x/") {
				t.Errorf("init around the stream at gx/data/x: exit %d, %q", code, stderr)
			}

			// A nested stream made without init's check.
			innerURL := at("fx/data/imagenet")
			s, err := store.Open(t.Context(), innerURL)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := txn.Create(t.Context(), s, txn.CreateOptions{Ranks: 2}); err != nil {
				t.Fatal(err)
			}
			_, staging, _ := prdStaging(t)
			prdStageSmall(t, staging, "b001")
			prdMust(t, bin, "run", "--once", "--store", innerURL, "--staging", staging, "--producer-id", "w")
			before := keysOf(t, s)
			out := prdMust(t, bin, "gc", "--store", at("fx"), "--grace", "0s")
			if !strings.Contains(out, "left alone: another stream at data/imagenet/") {
				t.Errorf("gc of the outer stream does not say it left the inner one: %q", out)
			}
			if after := keysOf(t, s); !slices.Equal(before, after) {
				t.Fatalf("gc of the outer stream changed the inner one:\nbefore %v\nafter  %v", before, after)
			}
			var st struct{ Head *int64 }
			if err := json.Unmarshal([]byte(prdMust(t, bin, "status", "--store", innerURL, "--json")), &st); err != nil || st.Head == nil || *st.Head != 0 {
				t.Fatalf("status of the inner stream after gc: head %v, %v", st.Head, err)
			}
		})
	}
}

// withPrefix is url (file:///dir or s3://bucket/prefix?query) with sub
// appended to its path.
func withPrefix(t *testing.T, url, sub string) string {
	t.Helper()
	path, query, _ := strings.Cut(url, "?")
	out := strings.TrimSuffix(path, "/") + "/" + sub
	if query != "" {
		out += "?" + query
	}
	return out
}

func keysOf(t *testing.T, s store.Store) []string {
	t.Helper()
	var keys []string
	if err := store.Walk(t.Context(), s, "", "", func(o store.Info) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}
