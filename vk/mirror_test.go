//go:build cgo

package vk

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The structures vkrt builds itself (vkrt_vk.h) have the sizes, alignments
// and field offsets of Khronos' declarations: testdata/mirror_check.c
// asserts each at compile time against the vulkan_core.h vulkan-go ships.
func TestMirroredStructsMatchTheVulkanHeader(t *testing.T) {
	// A check of the build: a test binary carried to a machine without the
	// toolchain (a GPU host) has nothing to compile with.
	cc, err := exec.LookPath("cc")
	if err != nil {
		cc, err = exec.LookPath("gcc")
	}
	if _, goErr := exec.LookPath("go"); err != nil || goErr != nil {
		t.Skip("needs the Go toolchain and a C compiler, as building this package does")
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/vulkan-go/vulkan").Output()
	require.NoError(t, err, "locating vulkan-go's module")
	headers := strings.TrimSpace(string(out))
	require.FileExists(t, filepath.Join(headers, "vulkan", "vulkan_core.h"))
	cmd := exec.Command(cc, "-fsyntax-only", "-std=c11", "-I", headers, "-I", ".", filepath.Join("testdata", "mirror_check.c"))
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", msg)
}
