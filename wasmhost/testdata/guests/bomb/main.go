//go:build wasip1

// Command bomb ends badly on purpose: `bomb memory` allocates until the
// host's memory limit stops it, `bomb recurse` recurses without end, both
// holding a device buffer.
package main

import (
	"fmt"
	"os"

	"github.com/vkrt/vkrt/wasmhost/guest"
)

var sink [][]byte

func recurse(n int) int { return recurse(n+1) + 1 }

func main() {
	if _, err := guest.NewBuffer(1 << 20); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	switch os.Args[1] {
	case "memory":
		for {
			sink = append(sink, make([]byte, 1<<20))
		}
	case "recurse":
		fmt.Println(recurse(0))
	}
}
