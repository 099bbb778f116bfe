package txn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// FormatVersion is the on-store format this code reads and writes
// (docs/FORMAT.md). Readers refuse anything else.
const FormatVersion = 1

// Object keys under the stream root.
const (
	StreamKey   = "_stream.json"
	LogPrefix   = "_log/"
	HintKey     = "_log/_last_snapshot"
	DataPrefix  = "data/"
	ConsumerDir = "_consumers/"
)

// VersionKey is the log object of version v.
func VersionKey(v uint64) string { return fmt.Sprintf("_log/%020d.json", v) }

// SnapshotKey is the snapshot object of version v.
func SnapshotKey(v uint64) string { return fmt.Sprintf("_log/%020d.snap.json", v) }

// PackKey is the data object of one rank (rank >= 0) or of the shared
// step-level files (rank < 0) of a TGB.
func PackKey(producer string, epoch, seq uint64, rank int) string {
	if rank < 0 {
		return fmt.Sprintf("data/%s/%d/%d/shared.pack", producer, epoch, seq)
	}
	return fmt.Sprintf("data/%s/%d/%d/rank-%d.pack", producer, epoch, seq, rank)
}

// ErrCorrupt classifies every record that fails validation: garbage,
// unknown format, gaps, duplicated steps, bad names.
var ErrCorrupt = errors.New("corrupt or foreign log record")

// StreamConfig is _stream.json, written once by Create. Fields changed
// later through config actions live in State.Config.
type StreamConfig struct {
	Format    int       `json:"format"`
	StreamID  string    `json:"stream_id"`
	Ranks     int       `json:"ranks"`
	FirstStep int64     `json:"first_step"`
	ChunkSize int64     `json:"chunk_size"`
	CreatedAt time.Time `json:"created_at"`
	// SnapshotEvery: a committer writes a snapshot after each version that
	// is a multiple of it.
	SnapshotEvery uint64 `json:"snapshot_every"`
	// RetainCheckpoints: reclamation keeps the steps after the oldest of the
	// newest RetainCheckpoints checkpoints.
	RetainCheckpoints int `json:"retain_checkpoints"`
}

// Defaults for a new stream.
const (
	DefaultChunkSize         = 1 << 20
	DefaultSnapshotEvery     = 100
	DefaultRetainCheckpoints = 2
	MaxRanks                 = 1 << 16
	maxNameLen               = 255
	maxPathLen               = 4096
)

func (c *StreamConfig) validate() error {
	switch {
	case c.Format != FormatVersion:
		return fmt.Errorf("format version %d, this build reads %d; upgrade lakestream", c.Format, FormatVersion)
	case c.Ranks < 1 || c.Ranks > MaxRanks:
		return fmt.Errorf("ranks %d out of range [1,%d]", c.Ranks, MaxRanks)
	case c.FirstStep < 0:
		return fmt.Errorf("first step %d is negative", c.FirstStep)
	case c.ChunkSize < 4096 || c.ChunkSize > 1<<30:
		return fmt.Errorf("chunk size %d out of range [4KiB,1GiB]", c.ChunkSize)
	case c.SnapshotEvery < 1:
		return fmt.Errorf("snapshot_every %d must be >= 1", c.SnapshotEvery)
	case c.RetainCheckpoints < 1:
		return fmt.Errorf("retain_checkpoints %d must be >= 1", c.RetainCheckpoints)
	}
	return nil
}

// Version is one manifest log record, _log/<v>.json. It is written once,
// by create-if-absent, and never changes.
type Version struct {
	Format  int       `json:"format"`
	Version uint64    `json:"version"`
	Writer  Writer    `json:"writer"`
	Time    time.Time `json:"time"`
	// Txn is random per commit: a writer whose create's outcome is unknown
	// reads the version back and knows it as its own by this.
	Txn string `json:"txn"`

	// Register bumps Writer.Producer's epoch to Writer.Epoch.
	Register *Register `json:"register,omitempty"`
	// TGBs added, with their assigned steps, in step order. All are the
	// writer's and their seqs follow the producer's previous seq.
	TGBs []*TGB `json:"tgbs,omitempty"`
	// Producer is the writer's state after this version, set whenever TGBs
	// are added.
	Producer *ProducerUpdate `json:"producer,omitempty"`
	// Checkpoints records durable training checkpoints after these steps.
	Checkpoints []int64 `json:"checkpoints,omitempty"`
	// Reclaim removes the steps below it from every view.
	Reclaim *Reclaim `json:"reclaim,omitempty"`
	// Purged lists reclaimed data objects that gc has deleted; they leave
	// State.Pending.
	Purged []string `json:"purged,omitempty"`
	// Config changes the stream's mutable settings.
	Config *ConfigChange `json:"config,omitempty"`
}

// Writer names who wrote a version. Producer is empty for administrative
// versions (checkpoints, reclamation, config).
type Writer struct {
	Producer string `json:"producer,omitempty"`
	Epoch    uint64 `json:"epoch,omitempty"`
}

// Register is a producer incarnation taking over its id. Instance is random
// per incarnation, so a register whose response was lost can be recognised
// as one's own.
type Register struct {
	Instance string `json:"instance"`
}

// ProducerUpdate is a producer's state after a version.
type ProducerUpdate struct {
	Seq    uint64 `json:"seq"`
	Cursor string `json:"cursor,omitempty"`
}

// Reclaim is a reclamation record: steps < Below leave the view.
type Reclaim struct {
	Below int64 `json:"below"`
}

// ConfigChange changes the stream's mutable settings.
type ConfigChange struct {
	RetainCheckpoints int `json:"retain_checkpoints,omitempty"`
}

// TGB is one committed Transactional Global Batch: the data of one step.
// Once decoded it is immutable and shared freely between goroutines.
type TGB struct {
	Step     int64     `json:"step"`
	Producer string    `json:"producer"`
	Epoch    uint64    `json:"epoch"`
	Seq      uint64    `json:"seq"`
	Batch    string    `json:"batch,omitempty"`  // staging batch name, if any
	Cursor   string    `json:"cursor,omitempty"` // the producer's source cursor after it
	Time     time.Time `json:"time"`             // commit time (the version's)
	Ranks    []*Pack   `json:"ranks"`
	Shared   *Pack     `json:"shared,omitempty"`
}

// Pack is one rank's (or the shared files') region of a data object: files
// concatenated, with a CRC32C (Castagnoli) of each file and of each
// ChunkSize-long chunk of the region. The region is [Off, Off+Size) of the
// object Key; file offsets and chunks count from Off. In format 1 every pack
// is a whole object (Off 0); from format 2 on, the ranks of a TGB share one.
type Pack struct {
	Key    string   `json:"key"`
	Off    int64    `json:"obj_off,omitempty"`
	Size   int64    `json:"size"`
	Files  []File   `json:"files"`
	Chunks []uint32 `json:"chunks"`
}

// File is one file inside a pack.
type File struct {
	Name string `json:"name"` // clean relative path, '/'-separated
	Off  int64  `json:"off"`
	Size int64  `json:"size"`
	CRC  uint32 `json:"crc"`
}

// Bytes is the total size of the TGB's packs.
func (t *TGB) Bytes() int64 {
	var n int64
	for _, p := range t.Ranks {
		n += p.Size
	}
	if t.Shared != nil {
		n += t.Shared.Size
	}
	return n
}

// Packs returns all the TGB's packs, ranks first.
func (t *TGB) Packs() []*Pack {
	ps := append([]*Pack(nil), t.Ranks...)
	if t.Shared != nil {
		ps = append(ps, t.Shared)
	}
	return ps
}

// ValidateName checks a file name inside a rank or the shared files: a clean
// relative '/'-separated path, no "..", "." or empty element, no element
// over 255 bytes, no NUL.
func ValidateName(name string) error {
	if name == "" || len(name) > maxPathLen || strings.ContainsRune(name, 0) {
		return fmt.Errorf("file name %q is empty, too long or has a NUL", name)
	}
	if path.Clean(name) != name || strings.HasPrefix(name, "/") {
		return fmt.Errorf("file name %q is not a clean relative path", name)
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." || el == "." || el == "" {
			return fmt.Errorf("file name %q has a %q element", name, el)
		}
		if len(el) > maxNameLen {
			return fmt.Errorf("file name %q has an element over %d bytes", name, maxNameLen)
		}
	}
	return nil
}

// validatePack checks a pack's internal consistency: names valid and unique
// (and no name both a file and a directory), files tiling the object in
// order, chunk CRC count matching the size.
func validatePack(p *Pack, chunkSize int64, sharedFiles bool) error {
	if p == nil {
		return errors.New("missing pack")
	}
	if !strings.HasPrefix(p.Key, DataPrefix) {
		return fmt.Errorf("pack key %q is not under %s", p.Key, DataPrefix)
	}
	if p.Size < 0 {
		return fmt.Errorf("pack %s has negative size", p.Key)
	}
	var off int64
	names := make(map[string]bool, len(p.Files))
	for _, f := range p.Files {
		if err := ValidateName(f.Name); err != nil {
			return fmt.Errorf("pack %s: %w", p.Key, err)
		}
		if sharedFiles && isRankDir(strings.SplitN(f.Name, "/", 2)[0]) {
			return fmt.Errorf("pack %s: shared file %q shadows a rank directory", p.Key, f.Name)
		}
		if names[f.Name] {
			return fmt.Errorf("pack %s: file %q appears twice", p.Key, f.Name)
		}
		names[f.Name] = true
		if f.Off != off || f.Size < 0 || f.Size > p.Size-off {
			return fmt.Errorf("pack %s: file %q at offset %d size %d does not follow offset %d", p.Key, f.Name, f.Off, f.Size, off)
		}
		off += f.Size
	}
	for name := range names {
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			if names[d] {
				return fmt.Errorf("pack %s: %q is both a file and a directory", p.Key, d)
			}
		}
	}
	if off != p.Size {
		return fmt.Errorf("pack %s: files sum to %d bytes, pack size is %d", p.Key, off, p.Size)
	}
	if want := (p.Size + chunkSize - 1) / chunkSize; int64(len(p.Chunks)) != want {
		return fmt.Errorf("pack %s: %d chunk CRCs, want %d", p.Key, len(p.Chunks), want)
	}
	return nil
}

func isRankDir(s string) bool {
	if !strings.HasPrefix(s, "rank-") || len(s) == len("rank-") {
		return false
	}
	for _, c := range s[len("rank-"):] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// DecodeVersion parses a version record and checks everything that can be
// checked without the state: format, number, shape of TGBs and packs.
// Cross-version checks (contiguity, fencing) happen in State.Apply.
func DecodeVersion(b []byte, wantVersion uint64, cfg *StreamConfig) (*Version, error) {
	var v Version
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: not a version record: %v", ErrCorrupt, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the version record", ErrCorrupt)
	}
	if v.Format != FormatVersion {
		return nil, fmt.Errorf("%w: format version %d, this build reads %d", ErrCorrupt, v.Format, FormatVersion)
	}
	if v.Version != wantVersion {
		return nil, fmt.Errorf("%w: record says version %d, its key says %d", ErrCorrupt, v.Version, wantVersion)
	}
	if err := v.validateShape(cfg); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return &v, nil
}

func (v *Version) validateShape(cfg *StreamConfig) error {
	if v.Register != nil && (v.Writer.Producer == "" || v.Register.Instance == "") {
		return errors.New("register without a producer or instance")
	}
	if v.Writer.Producer != "" {
		if err := validateProducerID(v.Writer.Producer); err != nil {
			return err
		}
	}
	if len(v.TGBs) > 0 && (v.Writer.Producer == "" || v.Producer == nil) {
		return errors.New("TGBs without a writing producer and its state")
	}
	if v.Producer != nil && len(v.TGBs) == 0 {
		// Only TGBs move a producer's seq and cursor; anything else could
		// rewind a seq and make the producer overwrite committed packs.
		return errors.New("producer state without TGBs")
	}
	if v.Register != nil && len(v.TGBs) > 0 {
		return errors.New("register and TGBs in one version")
	}
	for _, t := range v.TGBs {
		if t == nil {
			return errors.New("null TGB")
		}
		if t.Producer != v.Writer.Producer || t.Epoch != v.Writer.Epoch {
			return fmt.Errorf("step %d: TGB of %s/%d in a version written by %s/%d", t.Step, t.Producer, t.Epoch, v.Writer.Producer, v.Writer.Epoch)
		}
		if len(t.Ranks) != cfg.Ranks {
			return fmt.Errorf("step %d: %d ranks, stream has %d", t.Step, len(t.Ranks), cfg.Ranks)
		}
		for r, p := range t.Ranks {
			if err := validatePack(p, cfg.ChunkSize, false); err != nil {
				return fmt.Errorf("step %d rank %d: %w", t.Step, r, err)
			}
			// A pack's key is a function of its TGB: no record can point at
			// another step's data (gc would delete it under that step).
			if want := PackKey(t.Producer, t.Epoch, t.Seq, r); p.Key != want {
				return fmt.Errorf("step %d rank %d: pack key %q, want %q", t.Step, r, p.Key, want)
			}
		}
		if t.Shared != nil {
			if err := validatePack(t.Shared, cfg.ChunkSize, true); err != nil {
				return fmt.Errorf("step %d shared: %w", t.Step, err)
			}
			if want := PackKey(t.Producer, t.Epoch, t.Seq, -1); t.Shared.Key != want {
				return fmt.Errorf("step %d shared: pack key %q, want %q", t.Step, t.Shared.Key, want)
			}
		}
	}
	if v.Producer != nil && len(v.TGBs) > 0 && v.Producer.Seq != v.TGBs[len(v.TGBs)-1].Seq {
		return fmt.Errorf("producer seq %d is not the last TGB's seq %d", v.Producer.Seq, v.TGBs[len(v.TGBs)-1].Seq)
	}
	if v.Config != nil && v.Config.RetainCheckpoints < 0 {
		return errors.New("negative retain_checkpoints")
	}
	return nil
}

// encode returns the canonical JSON of a record.
func encode(x any) []byte {
	b, err := json.Marshal(x)
	if err != nil {
		panic(fmt.Sprintf("txn: encoding %T: %v", x, err)) // only plain structs are encoded
	}
	return append(b, '\n')
}

// Pack returns the pack of rank r (r >= 0) or the shared step-level files
// (r < 0; nil when the TGB has none) of a committed TGB. Callers go through
// it rather than the TGB's fields: from format 2 on a rank's file list lives
// outside the log and Pack fetches it.
func (l *Log) Pack(ctx context.Context, t *TGB, r int) (*Pack, error) {
	if r < 0 {
		return t.Shared, nil
	}
	if r >= len(t.Ranks) {
		return nil, fmt.Errorf("step %d has no rank %d", t.Step, r)
	}
	return t.Ranks[r], nil
}
