#!/usr/bin/env bash
# Compiles every GLSL compute kernel here to SPIR-V (no debug information,
# so the output depends only on the source and the compiler version) and
# validates the result. OUT_DIR (default: this directory) receives the .spv
# files; ci/check-kernels.sh compiles into a temporary one and compares.
set -euo pipefail
cd "$(dirname "$0")"
out="${OUT_DIR:-.}"
for tool in glslangValidator spirv-val; do
  command -v "$tool" >/dev/null || { echo "$tool not found (Debian: glslang-tools spirv-tools)" >&2; exit 1; }
done
for src in *.comp; do
  spv="$out/${src%.comp}.spv"
  glslangValidator --quiet -V --target-env vulkan1.0 -o "$spv" "$src"
  spirv-val --target-env vulkan1.0 "$spv"
done
