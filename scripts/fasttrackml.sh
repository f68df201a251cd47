#!/usr/bin/env bash
# Builds FastTrackML, a Go implementation of MLflow's tracking server that
# gotune's MLflow tests run against, and prints the binary's path. The build
# is cached: run it again and it prints the path at once.
#
#   scripts/fasttrackml.sh            # build (about 2 minutes) or reuse
#   GOTUNE_CI=1 go test ./mlflow/ ... # the tests find it in the same cache
#
# The cache is $GOTUNE_FASTTRACKML_CACHE, default ~/.cache/gotune/fml; the
# tests also take a binary named by $GOTUNE_FASTTRACKML.
set -euo pipefail

version=v0.6.0
cache="${GOTUNE_FASTTRACKML_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gotune/fml}"
bin="$cache/$version/fml"
if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi

scratch=$(mktemp -d)
tmp=""
trap 'rm -rf "$scratch" ${tmp:+"$tmp"}' EXIT
cd "$scratch"
cat >go.mod <<MOD
module fmlbuild

go 1.26
MOD
# One of FastTrackML's UI modules is missing from the checksum database;
# its SQLite driver (v1.14.16) lacks concat(), which its params queries
# need, so take the driver's release that gotune builds with.
export GOSUMDB=off GOFLAGS=-mod=mod
go get "github.com/G-Research/fasttrackml@$version" >&2
go get github.com/mattn/go-sqlite3@v1.14.53 >&2
mkdir -p "$(dirname "$bin")"
# Builds that run at once (the tests of two packages) each rename their own
# file into place.
tmp=$(mktemp "$bin.XXXXXX")
go build -o "$tmp" github.com/G-Research/fasttrackml >&2
chmod +x "$tmp"
mv -f "$tmp" "$bin"
echo "$bin"
