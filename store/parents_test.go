package store

import (
	"reflect"
	"testing"
)

func TestAncestors(t *testing.T) {
	for url, want := range map[string][]Ancestor{
		"file:///fx/data/imagenet":            {{"file:///fx/data", "imagenet"}, {"file:///fx", "data/imagenet"}, {"file:///", "fx/data/imagenet"}},
		"s3://bkt/x/data?endpoint=http://h:1": {{"s3://bkt/x?endpoint=http://h:1", "data"}, {"s3://bkt/?endpoint=http://h:1", "x/data"}},
		"s3://bkt":                            nil,
		"file:///":                            nil,
		"mem://a":                             nil,
	} {
		if got := Ancestors(url); !reflect.DeepEqual(got, want) {
			t.Errorf("Ancestors(%s) = %v; want %v", url, got, want)
		}
	}
}
