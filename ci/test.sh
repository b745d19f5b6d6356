#!/usr/bin/env bash
# The whole test suite from a fresh clone: installs what it needs, then
# checks formatting, vet, the portable builds, every ci/check-*.sh, and the
# tests (race detector and invariant checks on) and benchmarks once.
set -euo pipefail
cd "$(dirname "$0")/.."

bash ci/install.sh

export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH)/bin"
export VKRT_REQUIRE_DEVICE="${VKRT_REQUIRE_DEVICE:-1}"
export VKRT_REQUIRE_BROWSER="${VKRT_REQUIRE_BROWSER:-1}"
export CGO_ENABLED=1

step() { printf '\n== %s\n' "$*"; }

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change:"; echo "$unformatted"; exit 1; fi

step "go vet"
go vet ./...

step "portable builds (wasip1, js)"
portable=(./runtime/ ./memory/ ./dryrun/... ./kernel/... ./device/...)
for p in "${portable[@]}"; do
  [ -d "${p%...}" ] || continue
  GOOS=wasip1 GOARCH=wasm go build "$p"
  GOOS=js GOARCH=wasm go build "$p"
done

step "example guests (make examples)"
make examples

for check in ci/check-*.sh; do
  [ -e "$check" ] || continue
  step "$check"
  bash "$check"
done

# Without cgo the client runs on the pure-Go cpu device: dry runs, measured
# plans and the client's own tests need no Vulkan driver.
step "CGO_ENABLED=0 go test -short (the client on the cpu device; vk and vkrt devices say they need cgo)"
CGO_ENABLED=0 go test -short -count=1 -timeout 30m ./client/... ./memory/... ./dryrun/... ./kernel/... ./device/... ./conformance/... ./vk/ ./cmd/vkrt/

# The race detector slows the heavy whole-trace tests tenfold; they honour
# -short here and run in full in the plain pass below.
step "go test -race -short -tags invariants"
go test -race -short -tags invariants -count=1 -timeout 30m ./...

step "benchmarks, once each"
go test -run '^$' -bench . -benchtime 1x -count=1 -timeout 20m ./... >/tmp/vkrt-bench.log 2>&1 || { cat /tmp/vkrt-bench.log; exit 1; }
grep -E '^(ok|FAIL|Benchmark)' /tmp/vkrt-bench.log | head -100

step "go test (plain)"
go test -count=1 -timeout 30m ./...
