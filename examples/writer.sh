#!/usr/bin/env bash
# The smallest writer there is: cp + touch. Copies a prepared batch
# directory (rank-<r>/ subdirectories and any shared files) into the staging
# tree under a '.'-prefixed name lakefs-produce ignores, renames it into
# place whole, and seals it last.
#
#   writer.sh SRC_BATCH_DIR STAGING_DIR NAME
set -euo pipefail
if [ $# -ne 3 ]; then
	echo "usage: $0 SRC_BATCH_DIR STAGING_DIR NAME (NAME orders batches into steps)" >&2
	exit 2
fi
src=$1 staging=$2 name=$3
[ -e "$staging/$name/_SEALED" ] && exit 0 # sealed by an earlier run
rm -rf "$staging/.$name.tmp"
cp -r "$src" "$staging/.$name.tmp"
rm -rf "$staging/$name" # an unsealed leftover of a killed writer
mv "$staging/.$name.tmp" "$staging/$name"
touch "$staging/$name/_SEALED"
