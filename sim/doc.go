// Package sim runs the whole protocol in one process under simulation:
// many incarnations of `lakefs-produce run` (stage.Run over real staging
// directories), mounts' readers and heartbeats, checkpoints, standalone
// gc and verify, all against one in-memory store inside a
// testing/synctest bubble, so hours of heartbeats, grace periods and
// retention pass in a fraction of a second and a blocked goroutine is
// seen as blocked rather than slept for.
//
// A run is drawn from one seed (Run): the world (1-8 producers of 1-4
// ranks, 1-6 consumers, gc processes, --max-lead, retention, grace, a
// second stream nested under data/ or beside the stream) and the faults
// (store errors, responses lost after the write landed, a create's retry
// answered "exists", calls slower than every timeout, the store down,
// listings missing the newest keys, clock probes refused, clocks minutes
// apart, crashes at a time or at the n-th store call, zombies paused
// while a successor takes their id over on another staging directory,
// consumers stalled past the consumer timeout). Every fault ends at the
// run's length; everything must then finish within its drain.
//
// # Invariants
//
// They are checked against a model of each stream built from the objects
// as docs/FORMAT.md defines them (not through txn's decoder), on every
// write and delete that lands (model.go), by every reader on every byte
// (actors.go), and at the end (sim.go):
//
//   - versions are created once and contiguously, each of its own stream;
//   - every sealed batch is committed at most once, and by the end of the
//     drain exactly once; steps are contiguous; a producer's seqs are
//     contiguous; a TGB's epoch is its producer's registered one (a
//     fenced incarnation never lands a commit); a version references
//     only objects already whole in the store;
//   - a reclamation stays below what the retained checkpoints allow and
//     below every consumer with a step whose heartbeat, as each listing
//     the gc could have decided on showed it, stayed younger than the
//     consumer timeout until the reclamation landed;
//   - a delete touches only its own stream's keys, never a live step's
//     data, a reclaimed step's only after the grace period, an orphan only
//     once older than it; the second stream keeps every key;
//   - every byte a reader reads equals the byte sealed; a live step's
//     objects are never missing; verify finds nothing wrong with a live
//     step;
//   - no sealed batch is rejected; no incarnation stops for a reason
//     docs/RELIABILITY.md does not give; a zombie stops fenced; once the
//     faults end, every batch commits, every reader reaches the head and
//     every zombie stops within the drain, and every process stops within
//     minutes of the run's end.
//
// # Replay
//
// A failure names its seed, the world and the last events; `go test
// ./sim -run 'TestSim$' -seed N -v` replays it, printing every event. The
// schedule (the world, each fault window, each crash and pause, each
// call's draws, keyed by incarnation, call and attempt, a random key by
// its class) follows from the seed alone; the interleaving of goroutines inside one virtual instant
// does not, so a replay is usually, not always, the same run.
//
// # Not covered
//
// Code that needs the kernel or the network stays out: the FUSE node tree
// and the mount's cache, prefetch and memory files (readers here read
// through the view's lookup, fs.Snapshot.Step and txn.Log.Pack, and the
// store), the mount's poll cadence (readers refresh the log every
// second), the HTTP backends and the CSI driver. integration.TestChaos
// (real processes, kill -9, SIGSTOP zombies, Toxiproxy), the FUSE tests
// and the backends' tests against real servers cover those.
//
// # Locks
//
// world.mu guards the model, the event log and the counts; a handle's mu
// guards its pause gate and draws. A handle takes world.mu only after
// releasing its own (never both at once, but crash, which takes the
// handle's and then, released, the world's); the model's checks run under
// world.mu and take no other lock.
package sim
