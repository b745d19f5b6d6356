//go:build !unix

package environment

import "os"

// linkCount is 1 where the system does not say how many names a file has.
func linkCount(os.FileInfo) uint64 { return 1 }
