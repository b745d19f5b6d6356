//go:build unix

package environment

import (
	"os"
	"syscall"
)

// linkCount is how many names (hard links) the file info describes has:
// 1 where the system does not say.
func linkCount(info os.FileInfo) uint64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}
