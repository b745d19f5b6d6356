//go:build cgo

package vk

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	mirrorStruct = regexp.MustCompile(`(?s)typedef struct \{(.*?)\} (vkrt_vk_\w+); // (Vk\w+)`)
	mirrorField  = regexp.MustCompile(`(\w+)(\[[^\]]*\])*;`)
)

// mirrorChecks is C that asserts, at compile time, that every structure
// vkrt_vk.h mirrors has the size, alignment and field offsets of Khronos'
// declaration it names, and how many structures it covers.
func mirrorChecks(t *testing.T) (string, int) {
	header, err := os.ReadFile("vkrt_vk.h")
	require.NoError(t, err)
	var b strings.Builder
	b.WriteString("#include <stddef.h>\n#include \"vulkan/vulkan_core.h\"\n#include \"vkrt_vk.h\"\n")
	structs := mirrorStruct.FindAllStringSubmatch(string(header), -1)
	for _, m := range structs {
		body, mirror, real := m[1], m[2], m[3]
		fmt.Fprintf(&b, "_Static_assert(sizeof(%s) == sizeof(%s), \"%s: size differs from %s\");\n", mirror, real, mirror, real)
		fmt.Fprintf(&b, "_Static_assert(_Alignof(%s) == _Alignof(%s), \"%s: alignment differs from %s\");\n", mirror, real, mirror, real)
		for line := range strings.Lines(strings.TrimSpace(body)) {
			f := mirrorField.FindStringSubmatch(line)
			require.NotNil(t, f, "%s: a field line vkrt_vk.h's checks cannot read: %q", mirror, line)
			fmt.Fprintf(&b, "_Static_assert(offsetof(%s, %s) == offsetof(%s, %s), \"%s.%s: offset differs from %s\");\n",
				mirror, f[1], real, f[1], mirror, f[1], real)
		}
	}
	return b.String(), len(structs)
}

// The structures vkrt builds itself (vkrt_vk.h) have the sizes, alignments
// and field offsets of Khronos' declarations: each is asserted at compile
// time against the vulkan_core.h vulkan-go ships.
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
	checks, n := mirrorChecks(t)
	require.GreaterOrEqual(t, n, 30, "every mirror in vkrt_vk.h is read")
	src := filepath.Join(t.TempDir(), "mirror_check.c")
	require.NoError(t, os.WriteFile(src, []byte(checks), 0o644))
	here, err := os.Getwd()
	require.NoError(t, err)
	cmd := exec.Command(cc, "-fsyntax-only", "-std=c11", "-I", headers, "-I", here, src)
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", msg)
}
