package txn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/lakestream/lakestream/store"
)

// GCLeaseKey is held by the gc that is running (not by a dry run): gc is
// safe to run from several places at once (every phase is idempotent),
// but gcs running side by side each list and delete the same keys and
// each report deleting all of them (three gcs claimed 93 deletes for 31
// objects). The lease makes the others stand aside and say so. It is
// created with create-if-absent, kept fresh while gc runs, and deleted at
// its end; one its holder left (a gc killed) counts once its Last-Modified
// is gcLeaseTTL old by the store's clock.
const GCLeaseKey = "_gc.lease"

const (
	gcLeaseTTL   = 2 * time.Minute
	gcLeaseRenew = gcLeaseTTL / 4
)

// GCBusy says which gc holds the lease.
type GCBusy struct {
	Holder string    `json:"holder"` // host and pid
	Since  time.Time `json:"since"`  // when it took the lease, by the store's clock
}

// gcLease is the lease's content.
type gcLease struct {
	Holder string    `json:"holder"`
	Since  time.Time `json:"since"`
}

// takeGCLease takes the lease for a gc judging time by now, and returns
// its release (which stops keeping it fresh and deletes it), or busy when
// another gc holds a fresh one.
func takeGCLease(ctx context.Context, l *Log, now func() time.Time) (release func(), busy *GCBusy, err error) {
	host, _ := os.Hostname()
	mine := gcLease{Holder: fmt.Sprintf("%s pid %d", host, os.Getpid()), Since: now().UTC()}
	err = store.CreateBytes(ctx, l.Store, GCLeaseKey, encode(&mine))
	if errors.Is(err, store.ErrExists) {
		held, stale, herr := heldGCLease(ctx, l, now)
		if herr != nil {
			return nil, nil, herr
		}
		if !stale {
			return nil, held, nil
		}
		// Its holder stopped renewing it (killed): take it over. Two gcs
		// taking it over at once may both run, which is safe; only their
		// reports overlap.
		if err := l.Store.Delete(ctx, GCLeaseKey); err != nil {
			return nil, nil, fmt.Errorf("deleting the stale %s: %w", GCLeaseKey, err)
		}
		err = store.CreateBytes(ctx, l.Store, GCLeaseKey, encode(&mine))
		if errors.Is(err, store.ErrExists) {
			return nil, &GCBusy{Holder: "another gc", Since: mine.Since}, nil
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("taking %s: %w", GCLeaseKey, err)
	}
	renewCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(gcLeaseRenew)
		defer t.Stop()
		for {
			select {
			case <-renewCtx.Done():
				return
			case <-t.C:
				_ = store.PutBytes(renewCtx, l.Store, GCLeaseKey, encode(&mine)) // a miss: the next renewal tries again
			}
		}
	}()
	return func() {
		stop()
		<-done
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = l.Store.Delete(dctx, GCLeaseKey) // left behind, it goes stale in gcLeaseTTL
	}, nil, nil
}

// heldGCLease reads the lease another gc holds: who, and whether it is
// stale (not renewed for gcLeaseTTL, by its Last-Modified). A lease
// released meanwhile reads as stale.
func heldGCLease(ctx context.Context, l *Log, now func() time.Time) (*GCBusy, bool, error) {
	info, err := l.Store.Stat(ctx, GCLeaseKey)
	if errors.Is(err, store.ErrNotFound) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", GCLeaseKey, err)
	}
	if now().Sub(info.ModTime) >= gcLeaseTTL {
		return nil, true, nil
	}
	held := gcLease{Holder: "another gc", Since: info.ModTime}
	if b, err := readBounded(ctx, l.Store, GCLeaseKey, maxConfigBytes); err == nil {
		_ = json.Unmarshal(b, &held) // what it says is for the message only
	}
	return &GCBusy{Holder: held.Holder, Since: held.Since}, false, nil
}
