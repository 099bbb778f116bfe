// Command reader is the chaos test's trainer: it reads every step of a
// lakefs-mount in order, the way a training loop opens
// steps/<n>/rank-<r>/..., and appends one JSON line per finished step to
// -out with each file's size and SHA-256 and the (producer, batch) the
// writer stamped into it. Restarted, it resumes after the last step -out
// records, as a trainer resumes from its checkpoint.
//
// Usage:
//
//	reader -mnt /mnt/a -ranks 0,1 -out /tmp/a.jsonl [-until 999]
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// File is one file read; Rank -1 is a step-level file.
type File struct {
	Rank   int    `json:"rank"`
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Step is one line of -out.
type Step struct {
	Step     int64  `json:"step"`
	Producer string `json:"producer"`
	Batch    string `json:"batch"`
	Files    []File `json:"files"`
	// Waited is how long opening the step blocked (waiting for its commit,
	// or for a store or mount that was down).
	WaitedMS int64 `json:"waited_ms"`
}

func main() {
	mnt := flag.String("mnt", "", "mount point")
	ranksFlag := flag.String("ranks", "", "comma-separated ranks this node reads")
	out := flag.String("out", "", "JSON-lines record, appended (and read to resume)")
	first := flag.Int64("first", 0, "first step of the stream")
	until := flag.Int64("until", -1, "stop after this step (-1: never)")
	flag.Parse()
	var ranks []int
	for s := range strings.SplitSeq(*ranksFlag, ",") {
		r, err := strconv.Atoi(s)
		if err != nil {
			fail(2, fmt.Errorf("-ranks %q: %w", *ranksFlag, err))
		}
		ranks = append(ranks, r)
	}
	if *mnt == "" || *out == "" {
		fail(2, errors.New("need -mnt, -ranks and -out"))
	}
	next, err := resume(*out, *first)
	if err != nil {
		fail(1, err)
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fail(1, err)
	}
	for ; *until < 0 || next <= *until; next++ {
		start := time.Now()
		dir := filepath.Join(*mnt, "steps", strconv.FormatInt(next, 10))
		// With --wait the lookup blocks until the step is committed and
		// then says ENOENT; a trainer just asks again.
		for {
			_, err := os.Stat(dir)
			if err == nil {
				break
			}
			if !errors.Is(err, fs.ErrNotExist) {
				fail(1, fmt.Errorf("step %d: %w", next, err))
			}
			time.Sleep(20 * time.Millisecond)
		}
		st, err := readStep(dir, ranks)
		if err != nil {
			fail(1, fmt.Errorf("step %d: %w", next, err))
		}
		st.Step = next
		st.WaitedMS = time.Since(start).Milliseconds()
		line, err := json.Marshal(st)
		if err != nil {
			fail(1, err)
		}
		// One write per line: a kill leaves whole lines only.
		if _, err := f.Write(append(line, '\n')); err != nil {
			fail(1, err)
		}
	}
	if err := f.Close(); err != nil {
		fail(1, err)
	}
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "reader:", err)
	os.Exit(code)
}

// resume returns the step after the last one recorded in path.
func resume(path string, first int64) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return first, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	next := first
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var s Step
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		next = s.Step + 1
	}
	return next, sc.Err()
}

// readStep reads this node's ranks and the step-level files of one step.
func readStep(dir string, ranks []int) (Step, error) {
	var st Step
	ents, err := os.ReadDir(dir)
	if err != nil {
		return st, err
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		f, _, err := readFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return st, err
		}
		f.Rank, f.Name = -1, e.Name()
		st.Files = append(st.Files, f)
	}
	for _, r := range ranks {
		rdir := filepath.Join(dir, fmt.Sprintf("rank-%d", r))
		err := filepath.WalkDir(rdir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			f, hdr, err := readFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(rdir, path)
			f.Rank, f.Name = r, filepath.ToSlash(rel)
			p, b := stamp(hdr)
			if st.Producer == "" {
				st.Producer, st.Batch = p, b
			} else if p != st.Producer || b != st.Batch {
				return fmt.Errorf("%s is from %s/%s, other files of the step from %s/%s", path, p, b, st.Producer, st.Batch)
			}
			st.Files = append(st.Files, f)
			return nil
		})
		if err != nil {
			return st, err
		}
	}
	return st, nil
}

// readFile hashes a file and returns its first line.
func readFile(path string) (File, []byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return File{}, nil, err
	}
	defer fh.Close()
	h := sha256.New()
	var head bytes.Buffer
	n, err := io.Copy(io.MultiWriter(h, &limited{&head, 256}), fh)
	if err != nil {
		if errors.Is(err, syscall.EIO) {
			return File{}, nil, fmt.Errorf("%s: %w (a checksum mismatch or a store error)", path, err)
		}
		return File{}, nil, err
	}
	line, _, _ := bytes.Cut(head.Bytes(), []byte("\n"))
	return File{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, line, nil
}

// stamp parses the writer's first line "writer producer=P batch=B ...".
func stamp(line []byte) (producer, batch string) {
	for f := range strings.FieldsSeq(string(line)) {
		if v, ok := strings.CutPrefix(f, "producer="); ok {
			producer = v
		}
		if v, ok := strings.CutPrefix(f, "batch="); ok {
			batch = v
		}
	}
	return producer, batch
}

// limited keeps the first n bytes written to it.
type limited struct {
	b *bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if k := l.n - l.b.Len(); k > 0 {
		l.b.Write(p[:min(k, len(p))])
	}
	return len(p), nil
}
