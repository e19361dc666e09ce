#!/usr/bin/env bash
# Builds Traefik (the version e2e/go.mod pins as a tool) into .build/traefik
# and prints its path. The first build on a fresh machine takes 10-15 minutes
# on 2 cores; later ones come from the Go build cache in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/.build/traefik"
mkdir -p .build
if [ ! -x "$out" ] || [ e2e/go.mod -nt "$out" ] || [ e2e/go.sum -nt "$out" ]; then
	echo "building Traefik $(cd e2e && go list -m -f '{{.Version}}' github.com/traefik/traefik/v3) into .build/traefik (first time: 10-15 min)" >&2
	(cd e2e && go build -o "$out.tmp" github.com/traefik/traefik/v3/cmd/traefik)
	mv "$out.tmp" "$out"
fi
echo "$out"
