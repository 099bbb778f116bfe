#!/usr/bin/env bash
# The main job end to end on the embedded file:// store: create a stream,
# write a staging tree like any writer would, seal it into steps, mount the
# stream read-only and read the steps back through the kernel.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/bin
DIR=${DEMO_DIR:-$(mktemp -d /tmp/lakestream-demo.XXXXXX)}
STORE="file://$DIR/store"
STAGING=$DIR/staging
MNT=$DIR/mnt
RANKS=4
STEPS=50
mkdir -p "$DIR/store" "$STAGING" "$MNT"

say() { printf '\n== %s\n' "$*"; }

say "create a stream with $RANKS ranks at $STORE"
"$BIN/lakefs-produce" init --store "$STORE" --ranks $RANKS

say "a writer stages $STEPS batches (any language: files first, _SEALED last)"
for s in $(seq -w 1 $STEPS); do
	b=$STAGING/batch-$s
	for r in $(seq 0 $((RANKS - 1))); do
		mkdir -p "$b/rank-$r"
		head -c $((256 * 1024)) /dev/urandom >"$b/rank-$r/samples.bin"
		echo "{\"batch\": \"$s\", \"rank\": $r}" >"$b/rank-$r/index.json"
	done
	echo "{\"lr\": 0.001}" >"$b/step.json"
	touch "$b/_SEALED"
done

# Remember what was staged: batch i becomes step i-1 (name order).
mkdir -p "$DIR/expected"
for s in $(seq -w 1 $STEPS); do
	(cd "$STAGING/batch-$s" && find . -type f ! -name _SEALED | sort | xargs sha256sum) >"$DIR/expected/$((10#$s - 1))"
done

say "seal them into steps"
"$BIN/lakefs-produce" run --store "$STORE" --staging "$STAGING" --producer-id demo-0 --once --progress log
"$BIN/lakefs-produce" status --store "$STORE"

say "mount the stream read-only at $MNT"
"$BIN/lakefs-mount" --store "$STORE" --cache-size 256MiB "$MNT" 2>"$DIR/mount.log" &
MOUNT_PID=$!
cleanup() {
	kill -TERM $MOUNT_PID 2>/dev/null || true
	wait $MOUNT_PID 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 100); do
	[ -e "$MNT/head" ] && break
	sleep 0.1
done
if [ ! -e "$MNT/head" ]; then
	echo "the mount did not come up; its log:" >&2
	cat "$DIR/mount.log" >&2
	exit 1
fi

say "read it like a dataloader would"
echo "head: $(cat "$MNT/head")"
ls "$MNT/steps" | tr '\n' ' '
echo
ls -l "$MNT/steps/0" "$MNT/steps/0/rank-0"
cat "$MNT/steps/3/rank-2/index.json"
du -sh "$MNT/steps"

say "every byte read through the mount is the staged byte"
for n in $(seq 0 $((STEPS - 1))); do
	(cd "$MNT/steps/$n" && find . -type f | sort | xargs sha256sum) | diff -u "$DIR/expected/$n" -
done
echo "all $STEPS steps match what was staged ($(find "$MNT/steps" -type f | wc -l) files)"

say "verify the store, record checkpoints 3 and 5, see what gc would reclaim"
"$BIN/lakefs-produce" verify --store "$STORE"
"$BIN/lakefs-produce" checkpoint --store "$STORE" --step 3
"$BIN/lakefs-produce" checkpoint --store "$STORE" --step 5
"$BIN/lakefs-produce" gc --store "$STORE" --dry-run

cleanup
trap - EXIT
say "unmounted cleanly; demo files are in $DIR"
