package txn

import (
	"context"
	"fmt"
	"io"

	"github.com/lakestream/lakestream/store"
)

// PrintBatch lays b out as its TGB object would be and returns the batch's
// print (BatchPrint), reading every file once. A restarted producer uses it
// to prove a leftover staged batch is the one it committed when the
// committed object is gone (gc reclaimed the step and deleted it while the
// producer was down): only the print in its producer state is left.
func (l *Log) PrintBatch(ctx context.Context, b Batch) (BatchPrint, error) {
	// The key is checked but does not enter the table: any valid one does.
	w, err := newObjectWriter(ObjectKey("print", 1, 1), b.Ranks, b.Shared, l.Config.ChunkSize, nil)
	if err != nil {
		return BatchPrint{}, err
	}
	defer w.close()
	if _, err := io.Copy(io.Discard, store.ContextReader(ctx, w)); err != nil {
		return BatchPrint{}, fmt.Errorf("fingerprinting batch %q: %w", b.Name, err)
	}
	obj, _, _, err := w.finish()
	if err != nil {
		return BatchPrint{}, fmt.Errorf("fingerprinting batch %q: %w", b.Name, err)
	}
	return BatchPrint{Table: obj.Table, TableCRC: obj.TableCRC}, nil
}
