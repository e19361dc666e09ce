#!/usr/bin/env bash
# Installs what the tests and the demo need and the machine lacks:
# redis-server (Debian's package), and what the arguments name (Debian's
# packages of the same name). Go comes with the machine.
set -euo pipefail
# Extra commands to install may be named: scripts/deps.sh wrk (the benchmarks).
need=(redis-server "$@")
missing=()
for cmd in "${need[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "installing ${missing[*]}" >&2
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq "${missing[@]}" >/dev/null
		# The package starts a system instance on 6379; the tests start their own.
		(service redis-server stop || true) >/dev/null 2>&1
	else
		echo "missing: ${missing[*]} (apt-get install -y ${missing[*]})" >&2
		exit 1
	fi
fi
redis-server --version
