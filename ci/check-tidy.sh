#!/usr/bin/env bash
# go.mod and go.sum must be what `go mod tidy` makes of the code: every
# direct dependency listed as direct, nothing required that nothing imports.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! diff=$(go mod tidy -diff 2>&1); then
  echo "go.mod/go.sum are not tidy: run go mod tidy"
  echo "$diff"
  exit 1
fi
echo "go.mod and go.sum are tidy"
