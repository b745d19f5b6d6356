package conformance_test

import (
	"context"
	"fmt"
	"io"
	"regexp"

	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device/cpu"
)

// Running the kernel checks on the pure-Go device outside go test, and
// writing the report as CI systems read it.
func ExampleRunDevice() {
	rep := conformance.RunDevice(context.Background(), conformance.OnDevice(cpu.Open), conformance.Options{
		Run: regexp.MustCompile(`^kernel/(add|matmul)$`),
	})
	pass, fail, notSupported := rep.Counts()
	fmt.Println(pass, "passed,", fail, "failed,", notSupported, "not supported")
	for _, r := range rep.Results {
		fmt.Println(r.Check, r.Status)
	}
	// A file of the CI system's in place of io.Discard; WriteJSON and
	// WriteTable write the other forms.
	if err := rep.WriteJUnit(io.Discard); err != nil {
		fmt.Println(err)
	}
	// Output:
	// 2 passed, 0 failed, 0 not supported
	// kernel/add pass
	// kernel/matmul pass
}
