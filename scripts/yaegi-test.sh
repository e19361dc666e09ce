#!/usr/bin/env bash
# Runs the root package's tests interpreted by Yaegi v0.16.1 (the version
# Traefik ships), from a GOPATH layout so that Yaegi sees vendor/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.build/yaegi"
if [ ! -x "$bin" ]; then
	mkdir -p "$root/.build"
	(cd "$root/e2e" && go build -o "$bin" github.com/traefik/yaegi/cmd/yaegi)
fi
gopath=$(mktemp -d)
trap 'rm -rf "$gopath"' EXIT
mkdir -p "$gopath/src/github.com/tollgate-dev"
ln -s "$root" "$gopath/src/github.com/tollgate-dev/tollgate"
cd "$gopath"
GOPATH="$gopath" GO111MODULE=off GOFLAGS= "$bin" test "$@" github.com/tollgate-dev/tollgate
