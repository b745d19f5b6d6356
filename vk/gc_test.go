//go:build cgo

package vk

import (
	"runtime/debug"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/kernel"
)

// Calls that hand the driver structures (pipeline creation, descriptor
// writes, barriers, copies, submissions) survive a collector that runs all
// the time. Through vulkan-go their C copies were freed by finalizers, and
// a collection during the call freed them under the driver: a SIGSEGV that
// ends the whole test binary, about once in 60 runs of this test even with
// the collector held off around each call (calls.go says why).
func TestDriverCallsSurviveConstantGarbageCollection(t *testing.T) {
	openTestDevice(t) // skip or fail without Vulkan, like the rest
	defer debug.SetGCPercent(debug.SetGCPercent(1))
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() { // garbage, so the collector runs while the calls do
		defer churn.Done()
		var keep [][]byte
		for {
			select {
			case <-stop:
				return
			default:
				keep = append(keep[len(keep)/2:], make([]byte, 64<<10))
			}
		}
	}()
	defer func() { close(stop); churn.Wait() }()
	rounds := 6
	if testing.Short() {
		rounds = 3
	}
	for range rounds {
		d, err := Open(0) // fresh pipelines: vkCreateComputePipelines runs again
		require.NoError(t, err)
		const n = 1 << 12
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				x, err := d.storage.Alloc(4 * n)
				if err != nil {
					errs <- err
					return
				}
				out, _ := d.storage.Alloc(4 * n)
				for i := range 40 {
					ops := []kernel.Op{kernel.FillWords(n, uint32(w+i)).With(x), kernel.ReLU(n).With(x, out), kernel.Add(n).With(x, out, out)}
					if i%5 == 0 {
						ops = append(ops, kernel.Transpose(64, 64).With(x, out), kernel.Softmax(64, 64).With(x, out), kernel.MatMul(64, 64, 64).With(x, x, out))
					}
					if err := d.Dispatch(t.Context(), ops); err != nil {
						errs <- err
						return
					}
					if err := d.CopyBatch(t.Context(), []CopyPair{{Dst: out, Src: x}}); err != nil {
						errs <- err
						return
					}
				}
				d.storage.Dealloc(x.ID)
				d.storage.Dealloc(out.ID)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.NoError(t, d.Close())
	}
}
