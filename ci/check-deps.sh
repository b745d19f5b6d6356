#!/usr/bin/env bash
# cgo and vulkan-go stay inside vk/: no other package of the module may
# depend on them, directly or through another package (the portable packages
# must build for wasm, and the client reaches Vulkan only through vk/).
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
for pkg in $(go list ./... | grep -v '/vk$' | grep -v '/vk/'); do
  deps=$(go list -deps -f '{{.ImportPath}} {{if .CgoFiles}}cgo{{end}}' "$pkg")
  case "$pkg" in
    */client|*/client/*|*/cmd/*|*/conformance|*/conformance/*|*/wasmhost|*/wasmhost/*)
      continue ;; # these may use vk/ (and so vulkan-go) through its API
  esac
  if echo "$deps" | grep -q 'github.com/vulkan-go/vulkan'; then
    echo "$pkg depends on vulkan-go"; bad=1
  fi
  if echo "$deps" | grep '^github.com/vkrt/' | grep -q ' cgo$'; then
    echo "$pkg depends on a cgo package of this module"; bad=1
  fi
done
# No package outside vk/ may contain cgo files itself.
cgo=$(go list -f '{{if .CgoFiles}}{{.ImportPath}}{{end}}' ./... | grep -v '/vk$' | grep -v '/vk/' || true)
if [ -n "$cgo" ]; then echo "cgo outside vk/: $cgo"; bad=1; fi
exit $bad
