#!/usr/bin/env bash
# bench-read.sh OUTDIR: issue 33's read measurements with lakefs-bench read,
# every system side by side in one run (direct, plain-get, mount-blocks,
# mount), median of --runs 3, 4 ranks, readers 1 and 4, page cache dropped
# before every pass: 100 steps x one 4 MiB file per rank, and 10 steps x
# 256 files of 100 KiB per rank, on versitygw (started here on 127.0.0.1)
# and on file://. Each configuration's table (each mount row followed by
# its ratios to direct and plain-get) goes to OUTDIR/<store>-<shape>.txt.
# With PROFILE=1 it then takes a 5 s CPU profile of the mount while
# PROFILE_READERS (4) readers read PROFILE_STEPS (300) steps of 4 MiB from
# versitygw (OUTDIR/mount.pprof). STORES (s3 file) and SHAPES (4m small)
# narrow the grid; TLS=1 serves versitygw over HTTPS, KEEPALIVE=0 with
# its default of a connection per request, VERSITYGW names another
# build of it, PIN=1 puts the server on CPUs of its own and the rest on
# the others (scripts/benchenv.sh; each table's header says which). Run it on a
# quiet machine (each table records the load average before and after);
# QUIET, a command prefix, runs each configuration under it (e.g. a
# wrapper that waits for the load to drop):
#   scripts/bench-read.sh /tmp/read
set -euo pipefail
out=${1:?usage: bench-read.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
BENCH_NAME=bench-read
. scripts/benchenv.sh
s3="s3://bench/read?endpoint=$scheme://127.0.0.1:$port&region=us-east-1"

run() { # store, shape, bench read flags...
	local st=$1 shape=$2 url; shift 2
	case $st in s3) url=$s3 srvpid=$gw ;; file) url="file://$work/file" srvpid= ;; esac
	echo "== $st $shape ($pinned${TLS:+, TLS=$TLS}), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/$st-$shape.txt"
	${QUIET:-} "${client[@]}" ./bin/lakefs-bench read --store "$url" ${srvpid:+--server-pid "$srvpid"} --ranks 4 --readers 1,4 --runs 3 "$@" 2>&1 | tee -a "$out/$st-$shape.txt"
	echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/$st-$shape.txt"
}
for st in ${STORES:-s3 file}; do
	for shape in ${SHAPES:-4m small}; do
		case $shape in
		4m) run "$st" 4m --steps 100 --size 4MiB ;;
		small) run "$st" small --steps 10 --files-per-rank 256 --size 100KiB ;;
		esac
	done
done
if [ "${PROFILE:-0}" = 1 ]; then
	maddr=127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	${QUIET:-} "${client[@]}" ./bin/lakefs-bench read --store "$s3" --ranks 4 --readers ${PROFILE_READERS:-4} --steps ${PROFILE_STEPS:-300} --systems mount \
		--mount-arg=--pprof --mount-arg=--metrics-addr=$maddr >"$out/profile-run.txt" &
	bench=$!
	# The mount starts once the stream is written; profile its reads.
	for _ in $(seq 40000); do curl -sf "http://$maddr/metrics" >/dev/null && break; sleep 0.05; done
	curl -sf -o "$out/mount.pprof" "http://$maddr/debug/pprof/profile?seconds=5"
	wait "$bench"
	go tool pprof -top -nodecount=25 bin/lakefs-mount "$out/mount.pprof" >"$out/mount-top.txt" 2>&1
fi
