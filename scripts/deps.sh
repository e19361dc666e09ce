#!/usr/bin/env bash
# Installs what the tests and the demo need and the machine lacks:
# redis-server and prometheus/promtool (Debian's packages), and what the
# arguments name (Debian's packages of the same name). Go comes with the
# machine. Idempotent: nothing is installed when every command is there.
set -euo pipefail
# Extra commands to install may be named: scripts/deps.sh wrk (the benchmarks).
need=(redis-server prometheus promtool "$@")

# The Debian package that provides a command.
package_of() {
	case "$1" in
	promtool) echo prometheus ;;
	*) echo "$1" ;;
	esac
}

missing=()
for cmd in "${need[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 && continue
	pkg=$(package_of "$cmd")
	case " ${missing[*]-} " in *" $pkg "*) ;; *) missing+=("$pkg") ;; esac
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "installing ${missing[*]}" >&2
		export DEBIAN_FRONTEND=noninteractive
		# apt's chatter (debconf's notes included) only when it fails.
		log=$(mktemp)
		trap 'rm -f "$log"' EXIT
		# No recommends: prometheus's would add prometheus-node-exporter,
		# one more system service.
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1 ||
			{ cat "$log" >&2; exit 1; }
		# The packages start system instances (redis on 6379, prometheus on
		# 9090); the tests start their own.
		for svc in redis-server prometheus; do
			(service "$svc" stop || true) >/dev/null 2>&1
		done
	else
		echo "missing: ${missing[*]} (apt-get install -y ${missing[*]})" >&2
		exit 1
	fi
fi
redis-server --version
prometheus --version 2>&1 | sed -n 1p # (sed reads it all: no SIGPIPE under pipefail)
