# Tollgate: the two commands a newcomer needs are `make demo` and `make test`.
.PHONY: demo test check rules unit yaegi e2e bench bench-check vendor

# A live demo: three real Traefik replicas with Tollgate sharing one
# redis-server; Redis is killed and restarted midway. About a minute (plus
# Traefik's first build, 10-15 minutes). `make demo ARGS=-keep` leaves the
# fleet up.
demo:
	scripts/deps.sh
	TOLLGATE_TRAEFIK=$$(scripts/traefik.sh) && cd e2e && TOLLGATE_TRAEFIK=$$TOLLGATE_TRAEFIK go run ./cmd/demo $(ARGS)

# Everything: static checks, unit tests compiled and under `yaegi test`, and
# the scenario suite against real redis-servers, compiled and through the
# Traefik-style Yaegi loader.
test: check unit yaegi e2e

check: rules
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '^vendor/'))" || { gofmt -l $$(git ls-files '*.go' | grep -v '^vendor/'); echo "gofmt needed"; exit 1; }
	go vet ./...
	cd e2e && go vet ./...
	scripts/vendor.sh --check
	@! grep -qE 'github.com/traefik/(traefik|yaegi)' go.mod || { echo "the root go.mod must not require Traefik or Yaegi"; exit 1; }

# The operator's kit (deploy/): promtool checks the Prometheus rules and
# runs their unit tests (each alert fired and not fired). The e2e suite
# evaluates every expression of the rules and of the Grafana dashboard
# against a real Prometheus scraping real replicas (e2e/metrics_ops_test.go).
rules:
	@command -v promtool >/dev/null 2>&1 || scripts/deps.sh
	promtool check rules deploy/prometheus/tollgate-rules.yml
	cd deploy/prometheus && promtool test rules tollgate-rules.test.yml

unit:
	go test -count=1 ./...

yaegi:
	scripts/yaegi-test.sh

# The scenario suite (compiled and through the Yaegi loader), the catalog
# form through Traefik's own plugin manager, the fleet suite: three real
# Traefik replicas (built once by scripts/traefik.sh into .build/) in front
# of one redis-server, and the region suite: 2 and 3 regions, each with its
# own redis-server and replicas, linked through delaying proxies. About 15
# minutes on 2 cores.
e2e:
	scripts/deps.sh
	TOLLGATE_TRAEFIK=$$(scripts/traefik.sh) && cd e2e && TOLLGATE_TRAEFIK=$$TOLLGATE_TRAEFIK go test -count=1 -timeout 30m ./...

# Traefik's rateLimit (memory, redis), Tollgate and a minimal one-round-trip
# plugin side by side in one Traefik: throughput, added latency, allocations
# and GC share per request, Redis cost and memory per key; writes
# bench/results.md and bench/chart.png (BENCHMARKS.md quotes them), with
# the hot-key load (-hotkeys), the cost of reading a response's cost from
# its body (-responsecost) and an independent harness's shape (-shape:
# wrk -t1 -c16, 1,000 and 10 keys, one replica). About 30 minutes.
# BENCH_ARGS='-before REV' adds Tollgate at git revision REV beside
# today's, in the same Traefik.
bench:
	scripts/deps.sh wrk
	TOLLGATE_TRAEFIK=$$(scripts/traefik.sh) && cd e2e && TOLLGATE_TRAEFIK=$$TOLLGATE_TRAEFIK go run ./cmd/bench \
		-out ../bench/results.md -chart ../bench/chart.png -profile ../.build/traefik-cpu.pprof $(BENCH_ARGS)

# One check in isolation, compiled and under Yaegi, with reference points
# (redigo, a bare EVALSHA, redis-benchmark); then where an interpreted
# check's CPU and allocations go, stage by stage, and the plugin's own work
# per check on the Redis and the fallback paths.
bench-check:
	scripts/deps.sh
	cd e2e && go run ./cmd/checkbench && go run ./cmd/costprobe

# Re-create vendor/ from go.mod and re-apply patches/.
vendor:
	scripts/vendor.sh
