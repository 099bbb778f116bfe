package txn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/lakestream/lakestream/store"
)

// Uploading is announcing. A TGB's object sits at a key anyone can derive
// from (producer, epoch, seq), is created once (create-if-absent) only
// after everything a reader checks has been checked, and from format 3
// ends with a self-description: the TGB's log entry minus its step and
// time. So a committer of version v+1 finds every registered producer's
// next TGBs by reading the ends of the objects at their next seqs (one
// request each), without asking their producers, and whatever it finds is
// exactly what the producer meant to commit.
//
// The end of a format 3 object:
//
//	[Footer, Size-16)  the description: one JSON line (announcement)
//	[Size-16, Size)    the trailer, little-endian: magic "LSFT", the
//	                   footer's own layout version (3, whatever the
//	                   stream's writer version), the description's length
//	                   and its CRC32C (uint32 each)

// ObjectKey is the one data object of a TGB: every rank's files, the
// shared step-level files and the index that says where each rank's are.
func ObjectKey(producer string, epoch, seq uint64) string {
	return fmt.Sprintf("data/%s/%d/%d/tgb.pack", producer, epoch, seq)
}

// ParseDataKey returns whose upload an object under data/ is:
// data/<producer>/<epoch>/<seq>/<name>, the directory of ObjectKey's pack
// with any file name (an upload may write others).
func ParseDataKey(key string) (producer string, epoch, seq uint64, ok bool) {
	parts := strings.Split(strings.TrimPrefix(key, DataPrefix), "/")
	if !strings.HasPrefix(key, DataPrefix) || len(parts) != 4 || parts[0] == "" || parts[3] == "" {
		return "", 0, 0, false
	}
	epoch, err1 := strconv.ParseUint(parts[1], 10, 64)
	seq, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	return parts[0], epoch, seq, true
}

const (
	footerMagic   = "LSFT"
	trailerSize   = 16
	maxCursorLen  = 4096
	maxFooter     = 16 << 10 // description + trailer; far above a 255-byte batch and a 4 KiB cursor
	tailReadBytes = 4 << 10  // one tail read covers any description but one with a huge cursor
)

// announcement is a TGB object's self-description. TableCRC is hex so the
// description's length is known before the data is read (the object is
// one PUT of declared length).
type announcement struct {
	Producer string `json:"producer"`
	Epoch    uint64 `json:"epoch"`
	Seq      uint64 `json:"seq"`
	Batch    string `json:"batch,omitempty"`
	Cursor   string `json:"cursor,omitempty"`
	// Nonce is random per Append: a producer whose create had an unknown
	// outcome and then found the key taken knows the object as its own.
	// It begins with the stream's id and a '-' (uploadNonce): an object a
	// producer of a deleted stream left at the key is known by it.
	Nonce    string `json:"nonce"`
	Data     int64  `json:"data"`
	Table    int64  `json:"table"`
	TableCRC hexCRC `json:"table_crc"`
	// TableParts: the CRCs of the table's parts when it has more than
	// partEntries entries (their number is a function of the rank count,
	// so the description's length is still known up front).
	TableParts []hexCRC `json:"table_parts,omitempty"`
}

// encodeFooter returns the description and trailer of a.
func (a *announcement) encodeFooter() []byte {
	desc := encode(a)
	b := make([]byte, 0, len(desc)+trailerSize)
	b = append(b, desc...)
	b = append(b, footerMagic...)
	b = binary.LittleEndian.AppendUint32(b, 3)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
	b = binary.LittleEndian.AppendUint32(b, CRC32C(desc))
	return b
}

// ErrNotAnnounced: no TGB object at a producer's next seq (yet).
var ErrNotAnnounced = errors.New("no TGB announced at this seq")

// errLeftoverUpload: the object at a producer's seq was uploaded by a
// producer of a stream deleted from this URL (identity.go). Nothing of
// this stream's is announced there: committers skip it, and the producer
// whose key it holds deletes it and uploads its own.
var errLeftoverUpload = fmt.Errorf("a deleted stream's upload: %w", ErrNotAnnounced)

// uploadNonce is a new Append's nonce: the stream's id, '-', 16 random hex
// digits.
func (l *Log) uploadNonce() string { return l.Config.StreamID + "-" + randomID() }

// nonceStream is the stream id a nonce begins with; ok is false for the
// bare random nonces of builds before uploadNonce.
func nonceStream(nonce string) (string, bool) {
	id, _, ok := strings.Cut(nonce, "-")
	return id, ok
}

// readAnnouncement reads the TGB a producer announced at (epoch, seq): its
// log entry without step and time, and the nonce of the Append that wrote
// it. A missing object is ErrNotAnnounced; one whose description does not
// check out is ErrCorrupt (nobody but the producer writes that key, so it
// is damage or tampering).
func (l *Log) readAnnouncement(ctx context.Context, producer string, epoch, seq uint64) (*TGB, string, error) {
	key := ObjectKey(producer, epoch, seq)
	tail, size, err := store.GetTail(ctx, l.Store, key, tailReadBytes)
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", fmt.Errorf("%s: %w", key, ErrNotAnnounced)
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading the end of %s: %w", key, err)
	}
	t, nonce, err := l.decodeFooter(ctx, key, tail, size)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
	}
	if id, ok := nonceStream(nonce); ok && id != l.Config.StreamID {
		if err := l.CheckIdentity(ctx); err != nil {
			return nil, "", err
		}
		return nil, "", fmt.Errorf("%s: an upload of stream %s, deleted from this URL: %w", key, id, errLeftoverUpload)
	}
	if t.Producer != producer || t.Epoch != epoch || t.Seq != seq {
		return nil, "", fmt.Errorf("%w: %s describes %s/%d/%d", ErrCorrupt, key, t.Producer, t.Epoch, t.Seq)
	}
	return t, nonce, nil
}

func (l *Log) decodeFooter(ctx context.Context, key string, tail []byte, size int64) (*TGB, string, error) {
	if len(tail) < trailerSize {
		return nil, "", fmt.Errorf("%d bytes, too short for a self-description", size)
	}
	tr := tail[len(tail)-trailerSize:]
	if string(tr[:4]) != footerMagic {
		return nil, "", errors.New("no self-description (trailer magic)")
	}
	if f := binary.LittleEndian.Uint32(tr[4:]); f != 3 {
		return nil, "", fmt.Errorf("self-description of format %d", f)
	}
	n, crc := int64(binary.LittleEndian.Uint32(tr[8:])), binary.LittleEndian.Uint32(tr[12:])
	if n+trailerSize > maxFooter || n+trailerSize > size {
		return nil, "", fmt.Errorf("self-description of %d bytes out of bounds", n)
	}
	footer := size - trailerSize - n
	var desc []byte
	if have := int64(len(tail)) - trailerSize; n <= have {
		desc = tail[have-n : have]
	} else {
		var err error
		if desc, err = getRange(ctx, l.Store, key, footer, n); err != nil {
			return nil, "", err
		}
	}
	if CRC32C(desc) != crc {
		return nil, "", errors.New("self-description fails its CRC32C")
	}
	var a announcement
	if err := strictDecode(desc, &a); err != nil {
		return nil, "", fmt.Errorf("self-description: %v", err)
	}
	t := &TGB{Producer: a.Producer, Epoch: a.Epoch, Seq: a.Seq, Batch: a.Batch, Cursor: a.Cursor, Object: &Object{
		Key: key, Size: size, Data: a.Data, Table: a.Table, TableCRC: uint32(a.TableCRC), TableParts: convertCRCs[uint32](a.TableParts), Footer: footer,
	}}
	// The table sits right before the footer: when the tail read holds it
	// (up to about 120 ranks), check it against the description for free.
	if start := size - int64(len(tail)); a.Table >= start && a.Table <= footer {
		if CRC32C(tail[a.Table-start:footer-start]) != uint32(a.TableCRC) {
			return nil, "", errors.New("the table fails the CRC32C its self-description gives")
		}
	}
	if err := ValidateProducerID(t.Producer); err != nil {
		return nil, "", err
	}
	if err := t.validateObject(&l.Config); err != nil {
		return nil, "", err
	}
	return t, a.Nonce, nil
}

// maxReclaimedReads bounds the objects ReclaimedBatch reads.
const maxReclaimedReads = 64

// ReclaimedBatch finds the TGB that producer committed for batch among
// the reclaimed steps whose objects gc has not deleted yet (the state's
// pending deletes), newest first, through their self-descriptions: a
// restarted producer can then still compare a leftover staging batch with
// what was committed, when others committed it and gc reclaimed the step
// while it was down. Its Step is -1 (reclaimed steps have no number in
// the state). nil when none is found in the newest maxReclaimedReads
// objects, or the stream is format 2 (objects without a description).
func (l *Log) ReclaimedBatch(ctx context.Context, st *State, producer, batch string) (*TGB, error) {
	if !l.Config.combining() {
		return nil, nil
	}
	reads := 0
	for i := len(st.Pending) - 1; i >= 0; i-- {
		keys := st.Pending[i].Keys
		for j := len(keys) - 1; j >= 0; j-- {
			p, epoch, seq, ok := ParseDataKey(keys[j])
			if !ok || p != producer {
				continue
			}
			if reads++; reads > maxReclaimedReads {
				return nil, nil
			}
			t, _, err := l.readAnnouncement(ctx, p, epoch, seq)
			if errors.Is(err, ErrNotAnnounced) || errors.Is(err, ErrCorrupt) {
				continue // deleted since, or not ours to judge
			}
			if err != nil {
				return nil, err
			}
			if t.Batch == batch {
				t.Step = -1
				return t, nil
			}
		}
	}
	return nil, nil
}
