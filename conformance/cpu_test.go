package conformance_test

import (
	"context"
	"testing"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device/cpu"
)

// The pure-Go device keeps the same contract as a GPU's, handed to the
// client with WithBackend (the client enforces the checks' memory limits).
func TestCPUDeviceConforms(t *testing.T) {
	conformance.TestDevice(t, func(ctx context.Context, opts ...client.Option) (*client.Client, error) {
		d, err := cpu.New(cpu.WithMemorySize(4 << 30))
		if err != nil {
			return nil, err
		}
		return client.Open(ctx, append([]client.Option{client.WithBackend(d)}, opts...)...)
	})
}
