#!/usr/bin/env bash
# The conformance suite from a built binary, as a vendor runs it, on the
# default device (lavapipe in CI): the exit is non-zero when any check
# fails, and then the whole table shows. The JUnit and JSON reports are
# left in bin/ for the CI system.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
CGO_ENABLED=1 go build -o bin/vkrt ./cmd/vkrt
if ! ./bin/vkrt conformance --junit bin/conformance-junit.xml --json bin/conformance.json >bin/conformance.txt; then
  cat bin/conformance.txt
  exit 1
fi
tail -n 1 bin/conformance.txt
