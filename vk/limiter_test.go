//go:build cgo

package vk

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// The storage tells the pools its largest page, what one storage-buffer
// binding covers and one allocation may be: a larger buffer is refused when it is asked for, with
// nothing allocated, and a layout whose pages pass it is refused whole.
func TestStorageLimitsThePoolsPages(t *testing.T) {
	d := openTestDevice(t)
	s, props := d.storage, d.Properties()
	bindable := min(d.Limits().MaxStorageBufferRange, d.info.Heaps[d.heapIndex].Size)
	if m := d.info.Limits.MaxMemoryAllocationSize; m > 0 {
		bindable = min(bindable, m)
	}
	limit := s.MaxAllocationSize()
	require.Zero(t, limit%props.Alignment, "pages are whole alignment units")
	require.LessOrEqual(t, limit, d.Limits().MaxStorageBufferRange)
	require.Greater(t, limit+props.Alignment, bindable, "the limit is the largest aligned size a binding covers")

	m, err := memory.NewManager(s, props, memory.SubSlicesLayout())
	require.NoError(t, err)
	h, err := m.Reserve(limit, memory.Lazy)
	require.NoError(t, err)
	require.NoError(t, m.Free(h))
	_, err = m.Reserve(limit+1, memory.Lazy)
	require.ErrorIs(t, err, vkruntime.ErrBufferTooBig)
	require.Zero(t, s.Allocations(), "lazy reservations and a refusal allocate nothing")

	_, err = memory.NewManager(s, props, memory.SlicedLayout(memory.SlicedPool{PageSize: limit + props.Alignment}))
	require.ErrorIs(t, err, &memory.InstallError{Kind: memory.InvalidLayout})
	require.ErrorContains(t, err, "larger than the backend's largest allocation")
	_, err = memory.NewManager(s, props, memory.SlicedLayout(memory.SlicedPool{PageSize: limit}))
	require.NoError(t, err)
}
