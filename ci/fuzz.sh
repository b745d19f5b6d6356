#!/usr/bin/env bash
# Fuzzes every fuzz target of the module for FUZZTIME each (default 30s),
# one after another (go test -fuzz takes one target at a time), and stops at
# the first that finds a failing input; go test writes that input under the
# package's testdata/fuzz/TARGET/, where plain `go test` replays it.
#
# Go 1.26's fuzzing coordinator can end a run with "context deadline
# exceeded" at the end of -fuzztime with no failing input (go.dev/issue/75804,
# fixed in Go 1.27): such a run writes no input and is reported, not failed.
set -uo pipefail
fuzztime=${FUZZTIME:-30s}
cd "$(dirname "$0")/.."

for file in $(git ls-files '*_test.go'); do
  pkg=./$(dirname "$file")
  for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //'); do
    corpus=$pkg/testdata/fuzz/$target
    before=$(ls "$corpus" 2>/dev/null | wc -l)
    echo "== $pkg $target ($fuzztime)"
    out=$(go test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" "$pkg" 2>&1)
    rc=$?
    after=$(ls "$corpus" 2>/dev/null | wc -l)
    if [ $rc -ne 0 ] && [ "$after" = "$before" ] && grep -q 'context deadline exceeded' <<<"$out"; then
      echo "$target: no failing input; the run ended in Go's fuzztime race (go.dev/issue/75804)"
    elif [ $rc -ne 0 ]; then
      echo "$out"
      echo "$target: FAILED (a failing input, if one was found, is in $corpus)"
      exit 1
    else
      tail -1 <<<"$out"
    fi
  done
done

