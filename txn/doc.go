// Package txn is Lakestream's manifest log: the ACID log that turns
// uploaded data into numbered training steps.
//
// # Objects
//
// A stream lives under a store root (docs/FORMAT.md has every field):
//
//	_stream.json                 StreamConfig, written once (create-if-absent)
//	_log/<v 20 digits>.json      Version v, written once (create-if-absent)
//	_log/<v>.snap.json           State as of v, every SnapshotEvery versions
//	_log/_last_snapshot          hint: newest snapshot version (may be stale)
//	data/<producer>/<epoch>/<seq>/tgb.pack  one TGB: every rank's region,
//	                             the shared files, then the index (a JSON
//	                             section per region and a table); see
//	                             Object and ReadIndex
//	_consumers/<node>.json       a mount's Heartbeat, overwritten while it
//	                             runs; gc and producers' --max-lead read it
//
// # Invariants
//
//  1. Version v+1 exists only if version v does, and is created by exactly
//     one writer (atomic create-if-absent): whoever creates it defines it.
//  2. Every version is built from the complete state at v; State.Apply
//     checks it, and readers refuse (ErrCorrupt, naming the object) any
//     record that breaks a rule, applying nothing past it:
//     steps are contiguous from the stream's first step, each producer's
//     seqs are contiguous, only the producer's registered epoch writes its
//     TGBs, names are clean relative paths, packs tile their files exactly.
//  3. A producer's epoch only grows. A version by an older epoch can never
//     follow the register of a newer one, because it would have to be built
//     from a state that includes that register (invariant 2): zombies are
//     fenced by construction.
//  4. A TGB's object is durable before the version that references it is
//     created, so a visible step's bytes are always readable. The log holds
//     only the object's key, size, index offsets and table CRC (a few
//     hundred bytes whatever the ranks and files); a reader fetches the
//     table and the sections of the ranks it reads, each checked by CRC and
//     bounded in size before it is fetched.
//  5. Snapshots and the hint only save reading; a missing or stale one
//     never changes the state a reader computes.
//
// # Commit state machine
//
// One attempt (Log.tryCommit); the caller loops on lostRace:
//
//	       build v = state+1 (steps, seqs, fencing, idempotence)
//	               │
//	               ▼
//	     ┌── create _log/<v> ◄────────────────────┐
//	     │         │                              │ absent
//	  ok │         │ unknown (5xx, 409,           │
//	     │         │ timeout, lost response)      │
//	     │         ▼                              │
//	     │   read _log/<v> ── retry on error ─────┤
//	     │         │ present                      │
//	     │         ├── Txn is ours ──┐            │
//	     ▼         ▼                 ▼            │
//	COMMITTED ◄────────────── (apply v)           │
//	               │ Txn is theirs, or create said ErrExists
//	               ▼
//	LOST RACE: refresh (read only versions > state) ──► fenced? ──► ErrFenced
//	               │
//	               ▼
//	Strategy delay (DAC: multiplicative increase + jitter), rebuild v
//	with the TGBs queued meanwhile, new steps, new Txn ──► create again
//
// # Concurrency
//
// Log is safe for concurrent use. A State belongs to one goroutine; the
// *TGB values it holds are immutable once applied and are shared freely
// (the mount hands them to readers). A Producer's mutable fields are
// guarded by Producer.mu; Append additionally serialises on appendMu, taken
// before mu (lock order: appendMu, then mu). The committer goroutine owns
// its State and never holds mu during I/O.
package txn
