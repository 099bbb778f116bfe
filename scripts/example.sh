#!/usr/bin/env bash
# Real training end to end on a file:// store: writer.py stages batches,
# lakefs-produce run seals them into steps, lakefs-mount shows them, and
# examples/train.py trains a 4-rank DDP model on them, checkpointing into the
# directory the mount watches (so gc reclaims behind it).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/bin
PY=${PYTHON:-/usr/bin/python3}
DIR=${EXAMPLE_DIR:-$(mktemp -d /tmp/lakestream-example.XXXXXX)}
STORE="file://$DIR/store"
RANKS=4 STEPS=${STEPS:-20}
mkdir -p "$DIR/store" "$DIR/staging" "$DIR/mnt" "$DIR/ckpt"
if ! "$PY" -c 'import torch' 2>/dev/null; then
	echo "$PY cannot import torch; install it with: apt-get install -y python3-torch" >&2
	exit 1
fi
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

"$BIN/lakefs-produce" init --store "$STORE" --ranks $RANKS
"$PY" examples/writer.py --staging "$DIR/staging" --ranks $RANKS --steps "$STEPS" --interval 0.1 >"$DIR/writer.log" &
pids+=($!)
"$BIN/lakefs-produce" run --store "$STORE" --staging "$DIR/staging" --producer-id example-0 \
	--progress log --gc-every 2s --gc-grace 0s 2>"$DIR/produce.log" &
pids+=($!)
"$BIN/lakefs-mount" --store "$STORE" --wait 2m --cache-size 64MiB --checkpoint-dir "$DIR/ckpt" "$DIR/mnt" 2>"$DIR/mount.log" &
pids+=($!)
for _ in $(seq 100); do [ -e "$DIR/mnt/head" ] && break; sleep 0.1; done
[ -e "$DIR/mnt/head" ] || { echo "the mount did not come up; its log:" >&2; cat "$DIR/mount.log" >&2; exit 1; }

"$PY" examples/train.py --mount "$DIR/mnt" --ranks $RANKS --steps "$STEPS" --ckpt-dir "$DIR/ckpt" --ckpt-every 5 >"$DIR/train.log"
"$PY" - "$DIR/train.log" <<'PYEOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
loss = {r["step"]: r["loss"] for r in recs if r.get("rank") == 0}
ids = [i for r in recs if "ids" in r for i in r["ids"]]
n = len(loss); k = max(1, n // 4)
first = sum(loss[s] for s in sorted(loss)[:k]) / k
last = sum(loss[s] for s in sorted(loss)[-k:]) / k
print(f"trained {n} steps x 4 ranks, {len(ids)} samples ({len(set(ids))} distinct)")
print(f"loss: first {k} steps {first:.3f} -> last {k} steps {last:.3f}")
PYEOF
echo "checkpoint: $(cat "$DIR/ckpt/latest_checkpointed_iteration.txt")"
"$BIN/lakefs-produce" status --store "$STORE"
echo "logs in $DIR"
