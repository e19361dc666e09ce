#!/usr/bin/env bash
# Runs the tests of every package of the root module (the root package and
# each one under internal/) interpreted by Yaegi v0.16.1 (the version
# Traefik ships), one `yaegi test` per package, from a GOPATH layout so that
# Yaegi sees vendor/. Arguments go to each run (e.g. -run 'TestX' -v); it
# fails if any package fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
module=github.com/tollgate-dev/tollgate
bin="$root/.build/yaegi"
if [ ! -x "$bin" ]; then
	mkdir -p "$root/.build"
	(cd "$root/e2e" && go build -o "$bin" github.com/traefik/yaegi/cmd/yaegi)
fi
gopath=$(mktemp -d)
trap 'rm -rf "$gopath"' EXIT
mkdir -p "$gopath/src/github.com/tollgate-dev"
ln -s "$root" "$gopath/src/$module"
# The packages: directories with .go files, but for vendor/, the e2e module,
# client/ and cmd/ (compiled Go for API consumers and operators; Traefik
# never loads them), testdata
# and what the go tool ignores (names starting with . or _).
pkgs=$(cd "$root" && find . \( -path ./vendor -o -path ./e2e -o -path ./client -o -path ./cmd -o -name testdata -o -name '.?*' -o -name '_*' \) -prune \
	-o -type f -name '*.go' -printf '%h\n' | sort -u)
cd "$gopath"
failed=()
for dir in $pkgs; do
	pkg=$module${dir#.}
	echo "== yaegi test $pkg"
	if ! GOPATH="$gopath" GO111MODULE=off GOFLAGS= "$bin" test "$@" "$pkg"; then
		failed+=("$pkg")
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "yaegi test failed: ${failed[*]}" >&2
	exit 1
fi
