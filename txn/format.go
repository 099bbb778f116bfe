package txn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// FormatVersion is the newest on-store format this build reads and writes
// (docs/FORMAT.md), and the one new streams get. Like Delta Lake's protocol
// versions, a stream records the reader and writer versions it needs
// (StreamConfig): this build reads a stream whose reader version is at most
// FormatVersion, and writes to one whose writer version is. Format 2
// streams (each producer commits only its own TGBs; TGB objects without a
// self-description) keep working: this build writes them as format 2.
// Format 3 adds the combining commit: a version may carry any registered
// producer's announced TGBs, found through the self-description at the end
// of each TGB object (announce.go).
const FormatVersion = 3

// minFormat is the oldest format this build reads and writes.
const minFormat = 2

// MaxStep is the highest step a stream may reach: 2^53-1, the largest
// integer that readers holding JSON numbers as doubles (jq, JavaScript)
// read exactly, and far past any training run (a step a millisecond for
// 285,000 years). A first step above it is refused, and so is a commit
// that would pass it, rather than wrap into negative steps.
const MaxStep = 1<<53 - 1

// ErrStepsExhausted: a commit would pass MaxStep.
var ErrStepsExhausted = errors.New("the stream has reached its highest step")

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

// ErrCorrupt classifies every record that fails validation: garbage,
// unknown format, gaps, duplicated steps, bad names.
var ErrCorrupt = errors.New("corrupt or foreign log record")

// StreamConfig is _stream.json, written once by Create. Fields changed
// later through config actions live in State.Config.
type StreamConfig struct {
	// Format is the stream's format: what binaries from before protocol
	// versions check (they refuse any other), so it is the highest of the
	// two versions below.
	Format int `json:"format"`
	// ReaderVersion and WriterVersion: the oldest code that may read, and
	// that may write, the stream (absent before format 3: both are Format).
	ReaderVersion int       `json:"reader_version,omitempty"`
	WriterVersion int       `json:"writer_version,omitempty"`
	StreamID      string    `json:"stream_id"`
	Ranks         int       `json:"ranks"`
	FirstStep     int64     `json:"first_step"`
	ChunkSize     int64     `json:"chunk_size"`
	CreatedAt     time.Time `json:"created_at"`
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
	MinChunkSize             = 4 << 10
	MaxChunkSize             = 1 << 30
	maxNameLen               = 255
	maxPathLen               = 4096
)

// readerVersion and writerVersion are the stream's protocol versions.
func (c *StreamConfig) readerVersion() int {
	if c.ReaderVersion == 0 {
		return c.Format
	}
	return c.ReaderVersion
}

func (c *StreamConfig) writerVersion() int {
	if c.WriterVersion == 0 {
		return c.Format
	}
	return c.WriterVersion
}

// combining reports whether the stream's records and objects are format 3
// or newer: versions carry any producer's TGBs, and TGB objects end with a
// self-description.
func (c *StreamConfig) combining() bool { return c.writerVersion() >= 3 }

// checkWritable refuses a stream that needs a newer writer than this build.
func (c *StreamConfig) checkWritable() error {
	if w := c.writerVersion(); w > FormatVersion {
		return fmt.Errorf("%w: the stream needs writer version %d, this build writes up to %d; upgrade lakestream to write to it (reading it works)", ErrNewerFormat, w, FormatVersion)
	}
	return nil
}

// ErrNewerFormat: the stream was made by a newer build than this one.
var ErrNewerFormat = errors.New("stream format is newer than this build")

func (c *StreamConfig) validate() error {
	switch r := c.readerVersion(); {
	case c.Format < minFormat:
		return fmt.Errorf("format version %d is no longer read (this build reads %d-%d); copy the data into a new stream", c.Format, minFormat, FormatVersion)
	case r > FormatVersion:
		return fmt.Errorf("%w: the stream needs reader version %d, this build reads up to %d; upgrade lakestream", ErrNewerFormat, r, FormatVersion)
	case r < minFormat || c.writerVersion() < r || c.Format != max(r, c.writerVersion()):
		return fmt.Errorf("format %d with reader version %d and writer version %d is not a valid combination", c.Format, r, c.writerVersion())
	case c.Ranks < 1 || c.Ranks > MaxRanks:
		return fmt.Errorf("ranks %d out of range [1,%d]", c.Ranks, MaxRanks)
	case c.FirstStep < 0 || c.FirstStep > MaxStep:
		return fmt.Errorf("first step %d out of range [0,%d]", c.FirstStep, MaxStep)
	case c.ChunkSize < MinChunkSize || c.ChunkSize > MaxChunkSize:
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
	// Stream is the stream id of the stream its writer committed to
	// (_stream.json's): a reader holding another stream never applies it
	// (identity.go). Absent in records of builds before it.
	Stream string `json:"stream,omitempty"`

	// void: a record of a deleted stream in this stream's log
	// (identity.go): it takes its version number and changes nothing.
	void bool

	// Register bumps Writer.Producer's epoch to Writer.Epoch.
	Register *Register `json:"register,omitempty"`
	// TGBs added, with their assigned steps, in step order. Each TGB's seq
	// follows its producer's previous seq (in the state, or earlier in this
	// list) and its epoch is its producer's registered one. From format 3
	// they may be any registered producer's (the combining commit); in
	// format 2 all are the writer's.
	TGBs []*TGB `json:"tgbs,omitempty"`
	// Producer is the writer's state after this version (format 2 only, set
	// whenever TGBs are added). From format 3 each producer's seq and
	// cursor are those of its last TGB in the version.
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

// Void reports a record of a deleted stream read in this stream's log: it
// takes its version number and changes nothing (identity.go).
func (v *Version) Void() bool { return v.void }

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
	Object   *Object   `json:"object"`
}

// Object is where a TGB's bytes are: one data object holding every rank's
// region, then the shared region (if any), then the index (docs/FORMAT.md):
//
//	[0, Data)        the regions, rank 0 first, files concatenated
//	[Data, Table)    one JSON section per region: its files and chunk CRCs
//	[Table, End)     the table: per region its offset, size, section and
//	                 section CRC; its own CRC is TableCRC, and a table of
//	                 more than partsFrom entries is also checked in
//	                 parts (TableParts, tableparts.go)
//	[Footer, Size)   format 3: the self-description (announce.go); End is
//	                 Footer. Format 2 objects end with the table (Footer 0).
//
// The log holds only this, so a step costs the log a few hundred bytes
// (past 4,096 ranks, up to 11 more per 1,024 ranks) at any number of ranks
// and files; a reader
// of rank r fetches the table, or only the part holding r's entry, and r's
// section (ReadIndex, ReadIndexSpan), and nobody else's.
type Object struct {
	Key        string   `json:"key"`
	Size       int64    `json:"size"`
	Data       int64    `json:"data"`
	Table      int64    `json:"table"`
	TableCRC   uint32   `json:"table_crc"`
	TableParts []uint32 `json:"table_parts,omitempty"`
	Footer     int64    `json:"footer,omitempty"`
}

// tableEnd is where the object's table ends.
func (o *Object) tableEnd() int64 {
	if o.Footer > 0 {
		return o.Footer
	}
	return o.Size
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

// Bytes is the size of the TGB's data object, index included.
func (t *TGB) Bytes() int64 { return t.Object.Size }

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
	if p.Size < 0 || p.Off < 0 {
		return fmt.Errorf("pack %s has a negative offset or size", p.Key)
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
	if v.Stream != "" && v.Stream != cfg.StreamID {
		// Another stream's: nothing else about it is this stream's to check.
		return nil, foreignStream{v.Stream}
	}
	if v.Format != cfg.writerVersion() {
		return nil, fmt.Errorf("%w: format version %d in a stream of writer version %d", ErrCorrupt, v.Format, cfg.writerVersion())
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
		if err := ValidateProducerID(v.Writer.Producer); err != nil {
			return err
		}
	}
	if v.Register != nil && len(v.TGBs) > 0 {
		return errors.New("register and TGBs in one version")
	}
	if len(v.TGBs) > 0 && v.Writer.Producer == "" {
		return errors.New("TGBs without a writing producer")
	}
	if err := v.validateProducers(); err != nil {
		return err
	}
	for _, t := range v.TGBs {
		if t == nil {
			return errors.New("null TGB")
		}
		if err := ValidateProducerID(t.Producer); err != nil {
			return fmt.Errorf("step %d: %w", t.Step, err)
		}
		if err := t.validateObject(cfg); err != nil {
			return err
		}
	}
	if v.Config != nil && v.Config.RetainCheckpoints < 0 {
		return errors.New("negative retain_checkpoints")
	}
	return nil
}

// validateProducers checks who a version's TGBs may belong to and how the
// producers' states move: in format 2, all TGBs are the writer's and the
// `producer` field carries its new seq and cursor; from format 3, TGBs may
// be anyone's and each carries its own cursor.
func (v *Version) validateProducers() error {
	if v.Format >= 3 {
		if v.Producer != nil {
			return errors.New("a format 3 record has no producer field; each TGB carries its cursor")
		}
		return nil
	}
	if len(v.TGBs) > 0 && v.Producer == nil {
		return errors.New("TGBs without the writing producer's state")
	}
	if v.Producer != nil && len(v.TGBs) == 0 {
		// Only TGBs move a producer's seq and cursor; anything else could
		// rewind a seq and make the producer overwrite committed packs.
		return errors.New("producer state without TGBs")
	}
	for _, t := range v.TGBs {
		if t != nil && (t.Producer != v.Writer.Producer || t.Epoch != v.Writer.Epoch) {
			return fmt.Errorf("step %d: TGB of %s/%d in a format 2 version written by %s/%d", t.Step, t.Producer, t.Epoch, v.Writer.Producer, v.Writer.Epoch)
		}
	}
	if v.Producer != nil && v.TGBs[len(v.TGBs)-1] != nil && v.Producer.Seq != v.TGBs[len(v.TGBs)-1].Seq {
		return fmt.Errorf("producer seq %d is not the last TGB's seq %d", v.Producer.Seq, v.TGBs[len(v.TGBs)-1].Seq)
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
