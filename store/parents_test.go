package store

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestAncestors(t *testing.T) {
	for url, want := range map[string][]Ancestor{
		"file:///fx/data/imagenet":            {{"file:///fx/data", "imagenet"}, {"file:///fx", "data/imagenet"}, {"file:///", "fx/data/imagenet"}},
		"s3://bkt/x/data?endpoint=http://h:1": {{"s3://bkt/x?endpoint=http://h:1", "data"}, {"s3://bkt/?endpoint=http://h:1", "x/data"}},
		"s3://bkt":                            nil,
		"gs://bkt/x/y?endpoint=http://h:1":    {{"gs://bkt/x?endpoint=http://h:1", "y"}, {"gs://bkt/?endpoint=http://h:1", "x/y"}},
		"az://c/x/y?account=a":                {{"az://c/x?account=a", "y"}, {"az://c/?account=a", "x/y"}},
		"file:///":                            nil,
		"mem://a":                             nil,
	} {
		if got := Ancestors(url); !reflect.DeepEqual(got, want) {
			t.Errorf("Ancestors(%s) = %v; want %v", url, got, want)
		}
	}
}

// TestDeleteErrorNamesNoKeys (issue 47 item 7): a delete of a thousand
// keys stopped by a signal says how many, not every key (gc printed a
// 100 KB line on Ctrl-C).
func TestDeleteErrorNamesNoKeys(t *testing.T) {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("_log/%020d.json", i)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := NewMem().Delete(ctx, keys...)
	if err == nil || len(err.Error()) > 200 || !strings.Contains(err.Error(), "1000 keys") {
		t.Fatalf("a cancelled delete of 1000 keys: %d bytes: %.300v", len(err.Error()), err)
	}
}
