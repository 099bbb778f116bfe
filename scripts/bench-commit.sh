#!/usr/bin/env bash
# bench-commit.sh OUT.jsonl [ROUNDS]: the commit benchmark grid of
# lakefs-bench ingest, side by side in one run: dac, naive and raw-put,
# 4 ranks, 64 KiB and 1 MiB TGBs, 1/4/16/32 producers (32 also as OS
# processes), 10 s windows, on versitygw (started here on 127.0.0.1), on
# file:// and on file:// with 50 ms per store call. Each output line is a
# bench ingest row plus "store", "round" and the 1-minute load average when
# the row ended. PAYLOADS, PRODUCERS, STORES (s3 file file+50ms) and
# PROCESSES (1: add the 32-producer process runs) narrow the grid.
# Run it on a quiet machine (nothing else running: each row records the
# load average, which should stay under 1 on 2 cores):
#   scripts/bench-commit.sh /tmp/commit.jsonl 2
set -euo pipefail
out=${1:?usage: bench-commit.sh OUT.jsonl [ROUNDS]}
rounds=${2:-1}
cd "$(dirname "$0")/.."
BENCH_NAME=bench-commit
. scripts/benchenv.sh
s3="s3://bench/grid?endpoint=$scheme://127.0.0.1:$port&region=us-east-1"

run() { # label, store URL, extra flags...
	local label=$1 url=$2; shift 2
	./bin/lakefs-bench ingest --store "$url" --ranks 4 --duration 10s --strategy dac,naive,raw-put --json "$@" |
		while read -r line; do echo "${line%\}},\"store\":\"$label\",\"round\":$r,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\"}"; done >>"$out"
}
point() { # store, flags...
	local st=$1; shift
	case $st in
	s3) run s3 "$s3" "$@" ;;
	file) run file "file://$work/file" "$@" ;;
	file+50ms) run file+50ms "file://$work/file" --store-latency 50ms "$@" ;;
	esac
}
for r in $(seq "$rounds"); do
	for payload in ${PAYLOADS:-1MiB 64KiB}; do
		for p in ${PRODUCERS:-1 4 16 32}; do
			for st in ${STORES:-s3 file file+50ms}; do point "$st" --producers "$p" --payload "$payload"; done
		done
		if [ "${PROCESSES:-1}" = 1 ]; then
			for st in ${STORES:-s3 file file+50ms}; do point "$st" --producers 32 --payload "$payload" --processes; done
		fi
	done
done
