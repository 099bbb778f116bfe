// Package longtest divides the test suite in two. `make test` runs
// `go test -short`: every package's tests less the long runs marked here
// (chaos runs, kill -9 storms, the end-to-end matrix on the GCS and Azure
// emulators, soak pieces, stress loops of a minute or more). `make
// test-all`, which CI runs, runs them too. docs/TESTING.md names, for each
// guarantee, the real-process test `make test` keeps; codecheck fails if
// one of those is marked long.
package longtest

import "testing"

// Skip skips t under -short: it is a long run, for the reason given.
func Skip(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("long test (%s): make test-all runs it", why)
	}
}

// SkipEmulator skips t under -short when kind is a store emulator's
// (gs: fake-gcs-server, az: Azurite): end to end, `make test` runs on
// file:// and S3 (versitygw); each emulator's store conformance suite
// stays in it.
func SkipEmulator(t testing.TB, kind string) {
	t.Helper()
	if kind == "gs" || kind == "az" {
		Skip(t, "the end-to-end matrix on the "+kind+" emulator")
	}
}
