package txn

import "context"

// Announce uploads an announced TGB object for producer at (epoch, seq)
// as Append would, without a Producer: what a killed or fenced
// incarnation leaves in the store.
func Announce(ctx context.Context, l *Log, producer string, epoch, seq uint64, b Batch) error {
	desc := &announcement{Producer: producer, Epoch: epoch, Seq: seq, Batch: b.Name, Cursor: b.Cursor, Nonce: randomID()}
	_, _, _, err := uploadObject(ctx, l.Store, ObjectKey(producer, epoch, seq), b.Ranks, b.Shared, l.Config.ChunkSize, desc)
	return err
}

// RegisterForTest commits a new incarnation of producer and returns its epoch.
func RegisterForTest(ctx context.Context, l *Log, producer string) (uint64, error) {
	st, err := l.Load(ctx)
	if err != nil {
		return 0, err
	}
	v, err := l.Commit(ctx, st, func(st *State) (*Version, error) {
		var epoch uint64 = 1
		if p := st.Producers[producer]; p != nil {
			epoch = p.Epoch + 1
		}
		return &Version{Writer: Writer{Producer: producer, Epoch: epoch}, Register: &Register{Instance: randomID()}}, nil
	}, nil)
	if err != nil {
		return 0, err
	}
	return v.Writer.Epoch, nil
}

// IdentityFresh is how recent a passed identity check lets a committer
// create without a new one.
const IdentityFresh = identityFresh
