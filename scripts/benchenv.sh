# benchenv.sh, sourced by the benchmark scripts: builds the binaries, makes
# a work directory (removed on exit) and starts versitygw on a free
# 127.0.0.1 port with a bucket "bench". Sets work, port, gw (its pid),
# scheme (http, or https with TLS=1) and exports the AWS_* variables the
# S3 client reads.
#
# versitygw keeps connections alive, as every cloud store does (its
# default closes each after one response, so every GET would pay a
# connect and TCP slow start; KEEPALIVE=0 keeps that default, to compare).
# With TLS=1 it serves HTTPS with a self-signed certificate for 127.0.0.1,
# trusted through AWS_CA_BUNDLE. VERSITYGW runs another build of it.
#
# PIN=1 measures as a cloud store is reached: the store server on CPUs of
# its own (CPU 0 of 2; the first half of the CPUs on a larger machine) and
# everything else on the rest (`client` runs a command there). Without
# it, server and client share every CPU, so each CPU second the server
# spends comes out of the reader's throughput. `pinned` describes it for
# table headers.
TOOLS=${LAKEFS_TOOLS:-$PWD/.tools}
make -s build
work=$(mktemp -d "/tmp/${BENCH_NAME:-bench}.XXXXXX")
trap 'kill "${gw:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
mkdir -p "$work/s3" "$work/file"
scheme=http tls=() keep=(--keep-alive)
[ "${KEEPALIVE:-1}" = 1 ] || keep=()
if [ "${TLS:-0}" = 1 ]; then
	scheme=https
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 \
		-addext subjectAltName=IP:127.0.0.1 -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
	tls=(--cert "$work/cert.pem" --key "$work/key.pem")
	export AWS_CA_BUNDLE=$work/cert.pem
fi
server=() client=() pinned="not pinned: server and client share all $(nproc) CPUs"
if [ "${PIN:-0}" = 1 ]; then
	ncpu=$(nproc)
	if ((ncpu < 2)); then
		echo "benchenv: PIN=1 needs at least 2 CPUs; this machine has $ncpu" >&2
		exit 1
	fi
	half=$((ncpu / 2))
	srvcpus=0-$((half - 1)) clicpus=$half-$((ncpu - 1))
	server=(taskset -c "$srvcpus") client=(taskset -c "$clicpus")
	pinned="pinned: store server on CPU $srvcpus, client on CPU $clicpus"
fi
gwbin=${VERSITYGW:-$TOOLS/bin/versitygw}
if [ ! -x "$gwbin" ]; then
	echo "benchenv: no versitygw at $gwbin: run make tools, or set VERSITYGW to a built binary" >&2
	exit 1
fi
"${server[@]}" "$gwbin" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" \
	--port "127.0.0.1:$port" --quiet "${keep[@]}" "${tls[@]}" posix "$work/s3" >"$work/versitygw.log" 2>&1 &
gw=$!
made=
for _ in $(seq 50); do
	aws --endpoint-url "$scheme://127.0.0.1:$port" s3 mb s3://bench >/dev/null 2>&1 && { made=1; break; }
	sleep 0.2
done
if [ -z "$made" ]; then
	echo "benchenv: versitygw ($gwbin) did not take a bucket on $scheme://127.0.0.1:$port in 10 s; its log:" >&2
	cat "$work/versitygw.log" >&2
	exit 1
fi
