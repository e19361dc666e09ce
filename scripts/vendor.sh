#!/usr/bin/env bash
# Re-creates vendor/ from go.mod and re-applies patches/*.patch (the smallest
# changes that let the vendored modules run under Yaegi v0.16.1).
#   scripts/vendor.sh          rewrite vendor/
#   scripts/vendor.sh --check  fail if vendor/ differs from go.mod + patches
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
if [ "$mode" = "--check" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	cp go.mod go.sum "$tmp"/
	cp ./*.go "$tmp"/ 2>/dev/null || true
	find internal -name '*.go' ! -name '*_test.go' -exec cp --parents {} "$tmp"/ \; 2>/dev/null || true
	rm -f "$tmp"/*_test.go
	cp -r patches "$tmp"/
	(cd "$tmp" && go mod vendor && for p in patches/*.patch; do patch -s -p1 <"$p"; done)
	find "$tmp/vendor" -name '*.orig' -delete
	if ! diff -r "$tmp/vendor" vendor >/dev/null; then
		diff -r "$tmp/vendor" vendor | head -20
		echo "vendor/ differs from go.mod + patches/: run scripts/vendor.sh" >&2
		exit 1
	fi
	echo "vendor/ matches go.mod + patches/"
	exit 0
fi
go mod vendor
for p in patches/*.patch; do
	patch -s -p1 <"$p"
done
find vendor -name '*.orig' -delete
echo "vendor/ rebuilt and patched"
