#!/usr/bin/env bash
# cgo and vulkan-go stay inside vk/: no other package of the module may have
# cgo files or import vulkan-go, and the packages below the client reach no
# cgo at all, directly or through another package, so they build with
# CGO_ENABLED=0 (and for wasm). Only the vk backend may be reached through
# the device interface: vk/ itself never imports memory/ or the client.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0

# No package outside vk/ contains cgo files or imports vulkan-go itself.
for pkg in $(go list ./... | grep -v '/vk$'); do
  line=$(go list -f '{{.ImportPath}} {{if .CgoFiles}}cgo{{end}} {{join .Imports " "}}' "$pkg")
  case " $line " in
    *" cgo "*) echo "$pkg has cgo files: cgo stays in vk/"; bad=1 ;;
  esac
  case " $line " in
    *" github.com/vulkan-go/vulkan "*) echo "$pkg imports vulkan-go: only vk/ may"; bad=1 ;;
  esac
done

# The portable packages depend on no cgo package and on vk/ not at all.
portable=(./runtime/... ./memory/... ./dryrun/... ./kernel/... ./device/... ./client/...)
for pkg in $(go list "${portable[@]}"); do
  deps=$(go list -deps -f '{{.ImportPath}} {{if .CgoFiles}}cgo{{end}}' "$pkg")
  if echo "$deps" | grep -q '^github.com/vkrt/vkrt/vk '; then
    echo "$pkg depends on vk/: reach devices through the device package"; bad=1
  fi
  if echo "$deps" | grep -q 'github.com/vulkan-go/vulkan'; then
    echo "$pkg depends on vulkan-go"; bad=1
  fi
  if echo "$deps" | grep '^github.com/vkrt/' | grep -q ' cgo$'; then
    echo "$pkg depends on a cgo package of this module"; bad=1
  fi
done

# vk/ is a backend below the pools: it must not reach up into them.
if go list -deps ./vk | grep -qE '^github.com/vkrt/vkrt/(memory|client|dryrun)$'; then
  echo "vk/ depends on memory/, dryrun/ or client/: backends sit below the pools"; bad=1
fi

# And they build without cgo, as does the command (vk/ then says it needs cgo).
if ! CGO_ENABLED=0 go build "${portable[@]}" ./cmd/vkrt; then
  echo "the portable packages or cmd/vkrt do not build with CGO_ENABLED=0"; bad=1
fi
[ $bad -eq 0 ] && echo "dependencies: cgo and vulkan-go stay in vk/; the portable packages build with CGO_ENABLED=0"
exit $bad
