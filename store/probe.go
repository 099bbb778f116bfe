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
//
// The first create may itself answer ErrExists: the key is random, so only
// an earlier attempt of the same create (a request whose answer was lost
// on the network, retried by the client) can have made it. As for every
// Create, reading back resolves it; the object holding the first bytes is
// the probe's own.
func Probe(ctx context.Context, s Store) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	key := ProbePrefix + hex.EncodeToString(rnd[:])
	defer s.Delete(context.WithoutCancel(ctx), key) //nolint:errcheck // best effort; gc sweeps leftovers
	if err := CreateBytes(ctx, s, key, []byte("first")); err != nil && !(errors.Is(err, ErrExists) && probeIsOurs(ctx, s, key)) {
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

// probeIsOurs says whether key holds the probe's first bytes: a first
// create that answered ErrExists was applied by an earlier attempt.
func probeIsOurs(ctx context.Context, s Store, key string) bool {
	got, err := ReadAll(ctx, s, key)
	return err == nil && string(got) == "first"
}
