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
//     seqs are contiguous, only a producer's registered epoch has its TGBs
//     added (whoever writes the version), names are clean relative paths,
//     packs tile their files exactly.
//  3. A producer's epoch only grows. A TGB of an older epoch can never be
//     added after the register of a newer one, because the version adding
//     it would have to be built from a state that includes that register
//     (invariant 2): zombies are fenced by construction, whoever commits.
//  4. A TGB's object is created once, complete and checked, before any
//     version references it (uploading is announcing, announce.go), so a
//     visible step's bytes are always readable, and whatever a committer
//     finds at a producer's next seq is what that producer meant to commit.
//     The log holds only the object's key, size, index offsets and table
//     CRC (a few hundred bytes whatever the ranks and files); a reader
//     fetches the table and the sections of the ranks it reads, each
//     checked by CRC and bounded in size before it is fetched.
//  5. Snapshots and the hint only save reading; a missing or stale one
//     never changes the state a reader computes.
//  6. A stream records the reader and writer versions it needs
//     (StreamConfig); this build reads up to FormatVersion and writes a
//     stream in its own format (format 2 streams get format 2 records).
//  7. Every decision by time compares the store's time with the store's
//     time, never two machines' clocks. A process reads the store's time
//     through Log.Now (a measured store.Clock in the commands: never
//     ahead of the store, at most about a second behind) and stamps what
//     it commits with it; a heartbeat is aged by its object's
//     Last-Modified (Heartbeat.Written), a reclamation by the later of its
//     record's time and Last-Modified, orphans, probes and log objects by
//     their Last-Modified. Ages are right to about a second whatever the
//     machines' clocks say, against timeouts of minutes: gc never reclaims
//     under a live reader nor deletes early because a clock is wrong, and
//     a dead reader stops holding it after ConsumerTimeout.
//
// # Commit state machine
//
// The combining commit (combine.go) runs one committer per producer:
//
//	           ┌──────────── FOLLOW ◄─────────────────────┐
//	own TGBs   │ read v+1 when expected (one GET)         │ lost the race,
//	waiting    │   found: apply, complete own TGBs in it  │ or nothing to
//	           │   absent past the help deadline, or two  │ commit anywhere
//	           │   versions left our TGB out ──┐          │
//	           │                               ▼          │
//	           │   BUILD v+1 from the state at v: own queue + one parallel
//	           │   round of tail reads at every registered producer's next
//	           │   seqs (registered epoch only), cut at the first gap
//	           │                               │
//	           │                  tryCommit (below)
//	           │                      won ─────┴───── lost ──► refresh
//	           ▼                       │
//	         LEAD: pace (grows while versions carry fewer TGBs than other
//	         active producers, shrinks while more), then BUILD v+2 ...
//
// One create attempt (Log.tryCommit):
//
//	create _log/<v>  ──ok────────────────────────────► COMMITTED
//	   │ ErrExists ──► refresh st ──────────────────► LOST RACE
//	   │ unknown (5xx, 409, timeout, lost response)
//	   └──► read _log/<v> until the read succeeds:
//	          absent ──► create again (same bytes)
//	          ours (same Txn) ──► COMMITTED
//	          theirs ──► refresh st ─────────────────► LOST RACE
//
// A lost race is never retried with the same record: the committer
// rebuilds from the refreshed state (new steps, the TGBs still waiting),
// so a TGB is added at most once whatever races, lost responses or
// crashes, and its producer learns of it from the log. Administrative
// writes (registers, checkpoints, gc) use Log.Commit, the same attempt in
// a loop; a leader's pace is never below half a round trip, so they get in.
//
// # Concurrency
//
// Log is safe for concurrent use. A State belongs to one goroutine; the
// *TGB values it holds are immutable once applied and are shared freely
// (the mount hands them to readers). A Producer's mutable fields are
// guarded by Producer.mu; Append additionally serialises on appendMu, taken
// before mu (lock order: appendMu, then mu). The committer goroutine owns
// its State and its committer fields and never holds mu during I/O.
package txn
