#!/usr/bin/env bash
# Installs SeaweedFS's `weed` into $TOOLS/bin (default .tools/bin) for the
# soak's second S3 implementation. `go install ...@version` refuses the
# module: its go.mod has a replace directive (go-bip39), which Go honours
# only in the main module. So: download the module source, copy it to a
# temp dir, and build there, where it is the main module. ~6 min on 2 cores.
set -euo pipefail
TOOLS=${TOOLS:-$(cd "$(dirname "$0")/.." && pwd)/.tools}
# A pinned pseudo-version: SeaweedFS tags (3.x) are not semver modules.
VERSION=${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}
BIN="$TOOLS/bin/weed"
if [[ -x "$BIN" && "$(cat "$BIN.version" 2>/dev/null)" == "$VERSION" ]]; then
	exit 0
fi
mkdir -p "$TOOLS/bin"
src=$(go mod download -json "github.com/seaweedfs/seaweedfs@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [[ -z "$src" || ! -d "$src" ]]; then
	echo "seaweedfs.sh: go mod download github.com/seaweedfs/seaweedfs@$VERSION gave no source dir" >&2
	exit 1
fi
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
cp -r "$src/." "$work/"
chmod -R u+w "$work"
echo "seaweedfs.sh: building weed $VERSION (several minutes)..." >&2
(cd "$work" && GOFLAGS=-mod=mod go build -o "$BIN.tmp" ./weed)
mv "$BIN.tmp" "$BIN"
echo "$VERSION" >"$BIN.version"
echo "seaweedfs.sh: installed $BIN" >&2
