package wasmhost

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// last_error counts the guest's live allocations in words: one in the
// singular, as the client's own allocation error does.
func TestOwnMemoryMessageCountsLiveAllocations(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{{0, "in 0 live allocations,"}, {1, "in 1 live allocation,"}, {2, "in 2 live allocations,"}} {
		ae := &client.AllocationError{
			Size:   1 << 20,
			Layout: memory.DirectLayout(),
			Pools:  memory.Report{Dynamic: []memory.PoolReport{{Kind: memory.DirectKind{}, Usage: memory.Usage{NumberAllocs: c.n, BytesInUse: 64 * c.n, BytesReserved: 64 * c.n}}}},
			Err:    fmt.Errorf("pool: %w", vkruntime.ErrOutOfDeviceMemory),
		}
		msg, ok := ownMemoryMessage(ae)
		require.True(t, ok)
		require.Contains(t, msg, c.want)
	}
}
