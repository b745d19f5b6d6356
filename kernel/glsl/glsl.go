// Package glsl holds vkrt's GLSL compute kernels and the SPIR-V compiled
// from them, embedded. Regenerate with `go generate ./kernel/glsl` after
// editing a .comp file (needs glslangValidator and spirv-val);
// ci/check-kernels.sh fails when the embedded SPIR-V is stale.
package glsl

import (
	"embed"
	"fmt"
)

//go:generate bash gen.sh

//go:embed *.spv
var spirv embed.FS

// SPIRV returns the compiled module of the kernel named name (its .comp file
// without the extension).
func SPIRV(name string) ([]byte, error) {
	b, err := spirv.ReadFile(name + ".spv")
	if err != nil {
		return nil, fmt.Errorf("vkrt: no compiled kernel %q: %w", name, err)
	}
	return b, nil
}
