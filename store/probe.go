package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrNoAtomicCreate: the store accepted a second create of one key, so it
// does not honour create-if-absent and commits on it would be unsafe.
var ErrNoAtomicCreate = errors.New("store does not honour create-if-absent")

// ProbePrefix holds Probe's keys, under a stream's root.
const ProbePrefix = "_probe/"

// Probe checks that s really honours create-if-absent: it creates a fresh
// key under _probe/ twice; the second create must fail with ErrExists. The
// probe key is removed afterwards. Commands run it before they write.
func Probe(ctx context.Context, s Store) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	key := ProbePrefix + hex.EncodeToString(rnd[:])
	defer s.Delete(context.WithoutCancel(ctx), key) //nolint:errcheck // best effort; gc sweeps leftovers
	if err := CreateBytes(ctx, s, key, []byte("first")); err != nil {
		if errors.Is(err, ErrUnsupported) {
			return fmt.Errorf("create-if-absent probe: %w: the store does not implement conditional writes (%w); use one that honours If-None-Match: * (see docs/STORES.md)", ErrNoAtomicCreate, err)
		}
		return fmt.Errorf("create-if-absent probe: first create of %s: %w", key, err)
	}
	err := CreateBytes(ctx, s, key, []byte("second"))
	switch {
	case errors.Is(err, ErrExists):
	case err == nil:
		return fmt.Errorf("create-if-absent probe: %w: a second create of %s succeeded; use a store with conditional writes (see docs/STORES.md)", ErrNoAtomicCreate, key)
	default:
		return fmt.Errorf("create-if-absent probe: second create of %s: %w", key, err)
	}
	got, err := ReadAll(ctx, s, key)
	if err != nil {
		return fmt.Errorf("create-if-absent probe: read back %s: %w", key, err)
	}
	if string(got) != "first" {
		return fmt.Errorf("create-if-absent probe: %w: the losing create of %s replaced the object", ErrNoAtomicCreate, key)
	}
	return nil
}
