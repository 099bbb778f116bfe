package txn

import "fmt"

// IDRule is what a producer id and a node id may be. Both become one
// segment of object keys (data/<producer>/..., _consumers/<node>.json), so
// they share the rule: no "/", no "." or "..", nothing a store or a shell
// treats specially.
const IDRule = "1-128 characters of [A-Za-z0-9._-]"

// ValidateProducerID checks a producer id before anything is opened, so a
// command can report a bad one as a usage error.
func ValidateProducerID(id string) error {
	if !validID(id) {
		return fmt.Errorf("producer id %q must be %s", id, IDRule)
	}
	return nil
}

// ValidateNodeID checks the node id a mount's heartbeat is written under.
func ValidateNodeID(id string) error {
	if !validID(id) {
		return fmt.Errorf("node id %q must be %s", id, IDRule)
	}
	return nil
}

func validID(id string) bool {
	if id == "" || len(id) > 128 || id == "." || id == ".." {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
