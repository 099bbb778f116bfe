package txn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/lakestream/lakestream/internal/backoff"
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

// gcLease is the lease's content. Token is random per taking: a gc whose
// create's answer was lost knows the lease as its own by it.
type gcLease struct {
	Holder string    `json:"holder"`
	Since  time.Time `json:"since"`
	Token  string    `json:"token"`
}

// takeGCLease takes the lease for a gc judging time by now, and returns
// its release (which stops keeping it fresh and deletes it), or busy when
// another gc holds a fresh one. Store errors are retried, as a commit's
// are, until ctx ends: a create whose answer was lost is resolved by
// reading the lease back.
func takeGCLease(ctx context.Context, l *Log, now func() time.Time) (release func(), busy *GCBusy, err error) {
	host, _ := os.Hostname()
	mine := gcLease{Holder: fmt.Sprintf("%s pid %d", host, os.Getpid()), Since: now().UTC(), Token: randomID()}
	body := encode(&mine)
	bo := newRetryWait(ctx)
	defer bo.done()
	tookOver := false
	for {
		err := store.CreateBytes(ctx, l.Store, GCLeaseKey, body)
		if err == nil {
			break
		}
		if ctx.Err() != nil || errors.Is(err, store.ErrInvalid) {
			return nil, nil, fmt.Errorf("taking %s: %w", GCLeaseKey, err)
		}
		// It exists, or the create's outcome is unknown: whose is it?
		held, rerr := readGCLease(ctx, l)
		switch {
		case rerr != nil:
			err = rerr
		case held == nil:
			continue // absent: create it (again)
		case held.Token == mine.Token:
			return l.keepGCLease(ctx, body), nil, nil
		case now().Sub(held.modified) < gcLeaseTTL:
			return nil, &GCBusy{Holder: held.Holder, Since: held.Since}, nil
		case tookOver:
			// Stale, and taken over by another gc since this one deleted it.
			return nil, &GCBusy{Holder: held.Holder, Since: held.Since}, nil
		default:
			// Its holder stopped renewing it (killed): take it over. Two
			// gcs taking it over at once may both run, which is safe; only
			// their reports overlap.
			tookOver = true
			if err = l.Store.Delete(ctx, GCLeaseKey); err == nil {
				continue
			}
		}
		if werr := bo.wait(ctx, err); werr != nil {
			return nil, nil, fmt.Errorf("taking %s: %w", GCLeaseKey, werr)
		}
	}
	return l.keepGCLease(ctx, body), nil, nil
}

// heldLease is a lease as read: its content and Last-Modified.
type heldLease struct {
	gcLease
	modified time.Time
}

// readGCLease reads the lease (nil when there is none).
func readGCLease(ctx context.Context, l *Log) (*heldLease, error) {
	info, err := l.Store.Stat(ctx, GCLeaseKey)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", GCLeaseKey, err)
	}
	b, err := readBounded(ctx, l.Store, GCLeaseKey, maxConfigBytes)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", GCLeaseKey, err)
	}
	h := &heldLease{modified: info.ModTime}
	if json.Unmarshal(b, &h.gcLease) != nil || h.Holder == "" {
		h.Holder, h.Since = "another gc", info.ModTime // what it says is for messages only
	}
	return h, nil
}

// keepGCLease keeps the lease fresh until its release, which deletes it.
func (l *Log) keepGCLease(ctx context.Context, body []byte) func() {
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
				_ = store.PutBytes(renewCtx, l.Store, GCLeaseKey, body) // a miss: the next renewal tries again
			}
		}
	}()
	return func() {
		stop()
		<-done
		// Retried for a while: a lease left behind holds every other gc
		// off until it is stale.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		bo := backoff.New(storeRetry)
		for l.Store.Delete(dctx, GCLeaseKey) != nil {
			if bo.Wait(dctx) != nil {
				return // it goes stale in gcLeaseTTL
			}
		}
	}
}
