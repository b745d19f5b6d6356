#!/usr/bin/env bash
# Installs what the build and tests need on a fresh Debian machine: Mesa's
# lavapipe (CPU Vulkan), the Vulkan loader and validation layers, the
# SPIR-V tools, wabt (wat2wasm assembles the WebAssembly guests of the
# wasmhost tests), and headless Chromium with a font for the HTML report's
# browser test. Only what is missing is installed.
#
# `ci/install.sh runtime` installs only what running vkrt needs (the Vulkan
# loader and lavapipe): `make demo` calls it so a fresh machine runs the
# main job without the test tools.
set -euo pipefail
packages=(libvulkan1 mesa-vulkan-drivers glslang-tools spirv-tools vulkan-validationlayers wabt chromium fonts-dejavu-core)
[ "${1:-}" = runtime ] && packages=(libvulkan1 mesa-vulkan-drivers)
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
