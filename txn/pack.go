package txn

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
)

// Castagnoli is the CRC32C table used for every checksum in a stream.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the CRC32C of b.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// ErrSource: a TGB's input file could not be read as declared (missing,
// unreadable, or a size other than declared). Retrying the upload cannot
// help; the batch is bad.
var ErrSource = errors.New("input file unreadable or changed")

// FileSource is one input file of a TGB: its name in the view, its exact
// size and how to read it. Open may be called more than once (an upload is
// retried from the start).
type FileSource struct {
	Name string
	Size int64
	Open func() (io.ReadCloser, error)
}

// BytesFile is a FileSource over an in-memory buffer.
func BytesFile(name string, b []byte) FileSource {
	return FileSource{Name: name, Size: int64(len(b)), Open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}}
}

// packReader streams the concatenation of files, computing each file's
// CRC and each chunk's CRC as the bytes go by, so a pack of any size is
// uploaded with bounded memory and checksummed from the bytes actually sent.
type packReader struct {
	files     []FileSource
	chunkSize int64

	i       int           // current file
	cur     io.ReadCloser // open file i, or nil
	left    int64         // bytes left in file i
	fileCRC uint32
	pack    Pack
	chunk   uint32 // running CRC of the current chunk
	inChunk int64  // bytes in the current chunk
}

func newPackReader(key string, files []FileSource, chunkSize int64) *packReader {
	pr := &packReader{files: files, chunkSize: chunkSize}
	pr.pack.Key = key
	pr.pack.Files = make([]File, 0, len(files))
	return pr
}

func (pr *packReader) Read(p []byte) (int, error) {
	for {
		if pr.i == len(pr.files) {
			return 0, io.EOF
		}
		f := pr.files[pr.i]
		if pr.cur == nil {
			rc, err := f.Open()
			if err != nil {
				return 0, fmt.Errorf("%w: %s: %v", ErrSource, f.Name, err)
			}
			pr.cur, pr.left, pr.fileCRC = rc, f.Size, 0
		}
		if pr.left == 0 {
			// The file must end exactly at its declared size.
			var one [1]byte
			n, err := pr.cur.Read(one[:])
			pr.cur.Close()
			pr.cur = nil
			if n > 0 {
				return 0, fmt.Errorf("%w: %s grew past its declared %d bytes", ErrSource, f.Name, f.Size)
			}
			if err != nil && err != io.EOF {
				return 0, fmt.Errorf("%w: %s: %v", ErrSource, f.Name, err)
			}
			pr.pack.Files = append(pr.pack.Files, File{Name: f.Name, Off: pr.pack.Size, Size: f.Size, CRC: pr.fileCRC})
			pr.pack.Size += f.Size
			pr.i++
			continue
		}
		want := int64(len(p))
		if want > pr.left {
			want = pr.left
		}
		n, err := pr.cur.Read(p[:want])
		if n > 0 {
			pr.account(p[:n])
			pr.left -= int64(n)
			return n, nil
		}
		if err == io.EOF {
			return 0, fmt.Errorf("%w: %s is shorter than its declared %d bytes", ErrSource, f.Name, f.Size)
		}
		if err != nil {
			return 0, fmt.Errorf("%w: %s: %v", ErrSource, f.Name, err)
		}
	}
}

func (pr *packReader) account(b []byte) {
	pr.fileCRC = crc32.Update(pr.fileCRC, castagnoli, b)
	for len(b) > 0 {
		n := min(int64(len(b)), pr.chunkSize-pr.inChunk)
		pr.chunk = crc32.Update(pr.chunk, castagnoli, b[:n])
		pr.inChunk += n
		b = b[n:]
		if pr.inChunk == pr.chunkSize {
			pr.pack.Chunks = append(pr.pack.Chunks, pr.chunk)
			pr.chunk, pr.inChunk = 0, 0
		}
	}
}

func (pr *packReader) close() {
	if pr.cur != nil {
		pr.cur.Close()
		pr.cur = nil
	}
}

// finish returns the pack's description once the store has taken every
// byte. A store may stop reading at the declared size, so finish reads on
// to EOF itself: that closes the last file and catches one that grew.
func (pr *packReader) finish() (*Pack, error) {
	var one [1]byte
	for {
		n, err := pr.Read(one[:])
		if n > 0 {
			return nil, fmt.Errorf("%w: pack %s: input longer than declared", ErrSource, pr.pack.Key)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if pr.inChunk > 0 {
		pr.pack.Chunks = append(pr.pack.Chunks, pr.chunk)
		pr.chunk, pr.inChunk = 0, 0
	}
	if pr.pack.Chunks == nil {
		pr.pack.Chunks = []uint32{}
	}
	p := pr.pack
	return &p, nil
}

// filesIn names the files of p that overlap the region bytes [lo, hi), for
// messages: ", file a" or ", files a, b and 3 more".
func filesIn(p *Pack, lo, hi int64) string {
	var names []string
	for _, f := range p.Files {
		if f.Off < hi && f.Off+f.Size > lo {
			names = append(names, f.Name)
		}
	}
	switch {
	case len(names) == 0:
		return ""
	case len(names) == 1:
		return ", file " + names[0]
	case len(names) <= 3:
		return ", files " + strings.Join(names, ", ")
	}
	return fmt.Sprintf(", files %s and %d more", strings.Join(names[:2], ", "), len(names)-2)
}

// VerifyPack checks data (a whole pack's bytes) against the pack's chunk
// and file CRCs.
func VerifyPack(p *Pack, data []byte, chunkSize int64) error {
	return errors.Join(packProblems(p, data, chunkSize)...)
}

// packProblems is every mismatch in data: each chunk whose CRC32C is
// wrong (naming the files it holds), then, where every chunk is right,
// each file whose own CRC32C is wrong (a manifest that disagrees with
// itself). A reader of the mount gets EIO for every one of them, so a
// check names them all, not the first.
func packProblems(p *Pack, data []byte, chunkSize int64) []error {
	if int64(len(data)) != p.Size {
		return []error{fmt.Errorf("pack %s: %d bytes, manifest says %d", p.Key, len(data), p.Size)}
	}
	var out []error
	for i, want := range p.Chunks {
		lo := int64(i) * chunkSize
		hi := min(lo+chunkSize, p.Size)
		if got := CRC32C(data[lo:hi]); got != want {
			out = append(out, fmt.Errorf("pack %s chunk %d (object bytes %d-%d%s): CRC32C %08x, manifest says %08x",
				p.Key, i, p.Off+lo, p.Off+hi-1, filesIn(p, lo, hi), got, want))
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, f := range p.Files {
		if got := CRC32C(data[f.Off : f.Off+f.Size]); got != f.CRC {
			out = append(out, fmt.Errorf("pack %s file %s: CRC32C %08x, manifest says %08x", p.Key, f.Name, got, f.CRC))
		}
	}
	return out
}
