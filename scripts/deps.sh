#!/usr/bin/env bash
# Installs what the tests and the demo need and the machine lacks:
# redis-server (Debian's package). Go comes with the machine.
set -euo pipefail
if ! command -v redis-server >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "installing redis-server" >&2
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq redis-server >/dev/null
		# The package starts a system instance on 6379; the tests start their own.
		(service redis-server stop || true) >/dev/null 2>&1
	else
		echo "redis-server is missing: apt-get install -y redis-server" >&2
		exit 1
	fi
fi
redis-server --version
