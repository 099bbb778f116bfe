# benchenv.sh, sourced by the benchmark scripts: builds the binaries, makes
# a work directory (removed on exit) and starts versitygw on a free
# 127.0.0.1 port with a bucket "bench". Sets work, port, gw (its pid) and
# exports the AWS_* variables the S3 client reads.
TOOLS=${LAKEFS_TOOLS:-$PWD/.tools}
make -s build
work=$(mktemp -d "/tmp/${BENCH_NAME:-bench}.XXXXXX")
trap 'kill "$gw" 2>/dev/null || true; rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
mkdir -p "$work/s3" "$work/file"
"$TOOLS/bin/versitygw" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" \
	--port "127.0.0.1:$port" --quiet posix "$work/s3" >"$work/versitygw.log" 2>&1 &
gw=$!
for _ in $(seq 50); do aws --endpoint-url "http://127.0.0.1:$port" s3 mb s3://bench >/dev/null 2>&1 && break; sleep 0.2; done
