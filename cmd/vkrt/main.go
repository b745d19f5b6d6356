// Command vkrt is the command line of the vkrt GPU compute runtime: list
// Vulkan devices (vkrt devices), replay recorded allocation streams and plan
// their pools (vkrt replay), read the memory records of an environment
// (vkrt records), check a device against the contract (vkrt
// conformance), chart pools over streams and records as an HTML page (vkrt
// report), run WebAssembly workloads on a device (vkrt run), and plan a
// workload's pools from a dry run or its recorded streams (vkrt plan).
//
// Each subcommand lives in its own file and registers itself on rootCmd from
// an init function.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

var rootCmd = &cobra.Command{
	Use:           "vkrt",
	Short:         "vkrt: a GPU compute runtime with measured memory pools",
	SilenceUsage:  true,
	SilenceErrors: true,
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, errorLine(err))
		// A guest that exited non-zero gives vkrt its own exit code.
		var guest *exitCode
		if errors.As(err, &guest) && guest.code > 1 && guest.code < 256 {
			os.Exit(guest.code)
		}
		os.Exit(1)
	}
}

// errorLine is how the command reports a failure: one "vkrt:" prefix, even
// when the error comes from a package whose errors already start with it.
func errorLine(err error) string {
	return "vkrt: " + strings.TrimPrefix(err.Error(), "vkrt: ")
}
