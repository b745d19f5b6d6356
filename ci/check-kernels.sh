#!/usr/bin/env bash
# The SPIR-V embedded in kernel/glsl must be what its GLSL sources compile to:
# recompile every kernel into a temporary directory (validating each with
# spirv-val) and compare byte for byte; also fail on a source without
# SPIR-V or SPIR-V without a source.
set -euo pipefail
cd "$(dirname "$0")/../kernel/glsl"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
OUT_DIR="$tmp" bash gen.sh
bad=0
for src in *.comp; do
  spv="${src%.comp}.spv"
  if [ ! -f "$spv" ]; then echo "kernel/glsl/$spv is missing: run go generate ./kernel/glsl"; bad=1; continue; fi
  if ! cmp -s "$spv" "$tmp/$spv"; then echo "kernel/glsl/$spv differs from what $src compiles to: run go generate ./kernel/glsl"; bad=1; fi
done
for spv in *.spv; do
  [ -f "${spv%.spv}.comp" ] || { echo "kernel/glsl/$spv has no source ${spv%.spv}.comp"; bad=1; }
done
[ $bad -eq 0 ] && echo "kernels: $(ls *.comp | wc -l) sources match their embedded SPIR-V"
exit $bad
