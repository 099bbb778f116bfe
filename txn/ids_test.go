package txn_test

import (
	"strings"
	"testing"

	"github.com/lakestream/lakestream/txn"
)

// TestProducerAndNodeIDsShareOneRule: a producer id and a node id are both
// one key segment; an id is good for one exactly when it is for the other.
func TestProducerAndNodeIDsShareOneRule(t *testing.T) {
	for _, id := range []string{"p", "node-1.example_2", "A", strings.Repeat("x", 128)} {
		if err := txn.ValidateProducerID(id); err != nil {
			t.Errorf("producer %q: %v", id, err)
		}
		if err := txn.ValidateNodeID(id); err != nil {
			t.Errorf("node %q: %v", id, err)
		}
	}
	for _, id := range []string{"", ".", "..", "a/b", "a b", "é", strings.Repeat("x", 129)} {
		if err := txn.ValidateProducerID(id); err == nil || !strings.Contains(err.Error(), txn.IDRule) {
			t.Errorf("producer %q: %v, want an error naming the rule", id, err)
		}
		if err := txn.ValidateNodeID(id); err == nil || !strings.Contains(err.Error(), txn.IDRule) {
			t.Errorf("node %q: %v, want an error naming the rule", id, err)
		}
	}
}
