#!/usr/bin/env bash
# Installs what the build and tests need on a fresh Debian machine: a C
# compiler for cgo (vk/ needs it; without one the go command turns cgo off
# and builds vk as a stub), Mesa's lavapipe (CPU Vulkan), the Vulkan loader
# and validation layers, the SPIR-V tools, wabt (wat2wasm assembles the WebAssembly guests of the
# wasmhost tests), and headless Chromium with a font for the HTML report's
# browser test. Only what is missing is installed.
#
# `ci/install.sh runtime` installs only what building and running vkrt
# needs (the C compiler, the Vulkan loader and lavapipe): `make demo` calls
# it before building so a fresh machine runs the main job without the test
# tools.
set -euo pipefail
packages=(gcc libc6-dev libvulkan1 mesa-vulkan-drivers glslang-tools spirv-tools vulkan-validationlayers wabt chromium fonts-dejavu-core)
[ "${1:-}" = runtime ] && packages=(gcc libc6-dev libvulkan1 mesa-vulkan-drivers)
need=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"
go mod download
