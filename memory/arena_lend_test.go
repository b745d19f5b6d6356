package memory

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// twinManagers are two managers on one layout over storages that refuse on
// request: one is refused a reservation, and both then place alike if the
// refusal left no trace.
func twinManagers(t *testing.T, l Layout) (refused *Manager, rs *refusingStorage, twin *Manager) {
	t.Helper()
	refused, rs = newRefusingManager(t, l)
	twin, _ = newRefusingManager(t, l)
	refused.SetLogger(slog.New(slog.DiscardHandler))
	twin.SetLogger(slog.New(slog.DiscardHandler))
	return refused, rs, twin
}

// A run that left the plan through the fallback pools has no rooms yet; a
// reservation the device then refuses made them, and kept them: later
// reservations were lent room as rooms made before those frees lay it out,
// not as rooms made afterwards.
func TestARefusedReservationLeavesNoRoomsBehind(t *testing.T) {
	l := ArenaLayout(ArenaPlan{
		Pages: []uint64{4096, 4096},
		Slots: []ArenaSlot{{Size: 1024, Page: 0, Offset: 0}, {Size: 1024, Page: 1, Offset: 0},
			{Size: 3072, Page: 0, Offset: 1024}, {Size: 3072, Page: 1, Offset: 1024}},
		Fallback: []SlicedPool{{PageSize: 8192}},
	})
	a, sa, b := twinManagers(t, l)
	var ha, hb []Handle
	for _, size := range []uint64{1024, 1024, 3072, 3072, 6000} { // the last leaves the plan
		ha, hb = append(ha, mustReserve(t, a, size, Eager)), append(hb, mustReserve(t, b, size, Eager))
	}
	sa.refuse = 1
	_, err := a.Reserve(4000, Eager)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	for _, i := range []int{3, 2} {
		require.NoError(t, a.Free(ha[i]))
		require.NoError(t, b.Free(hb[i]))
	}
	xa, xb := mustReserve(t, a, 16, Lazy), mustReserve(t, b, 16, Lazy)
	require.Equal(t, locate(t, b, xb), locate(t, a, xa), "the refused reservation left a trace")
	require.NoError(t, a.checkInvariants())
}

// A block lent before its page had memory went back to the head of its
// bin when the device refused the memory, ahead of blocks it had been
// behind.
func TestARefusedPageLeavesTheRoomsInTheirOrder(t *testing.T) {
	l := ArenaLayout(ArenaPlan{
		Pages:    []uint64{4096, 4096},
		Slots:    []ArenaSlot{{Size: 1008, Page: 0, Offset: 0}, {Size: 1024, Page: 1, Offset: 0}},
		Fallback: []SlicedPool{{PageSize: 8192}},
	})
	a, sa, b := twinManagers(t, l)
	for _, m := range []*Manager{a, b} {
		mustReserve(t, m, 1008, Lazy)
		mustReserve(t, m, 1024, Lazy)
		mustReserve(t, m, 6000, Eager)                          // leaves the plan
		require.NoError(t, m.Free(mustReserve(t, m, 16, Lazy))) // the rooms are made
	}
	sa.refuse = 2 // the page lent and a fallback page
	_, err := a.Reserve(3088, Eager)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.NoError(t, a.checkInvariants())
	xa, xb := mustReserve(t, a, 16, Lazy), mustReserve(t, b, 16, Lazy)
	require.Equal(t, locate(t, b, xb), locate(t, a, xa), "the refused reservation left a trace")
}

// The device's refusal of a held page's memory, which a reservation past
// every fallback pool was lent room in, is what the reservation fails
// with, not "buffer too big": the same reservation fits where the device
// has the memory.
func TestARefusalToLendIsOutOfDeviceMemory(t *testing.T) {
	l := ArenaLayout(ArenaPlan{
		Pages:    []uint64{32768},
		Slots:    []ArenaSlot{{Size: 1024, Page: 0, Offset: 0}},
		Fallback: []SlicedPool{{PageSize: 8192}},
	})
	a, sa, b := twinManagers(t, l)
	for _, m := range []*Manager{a, b} {
		mustReserve(t, m, 1024, Lazy)
		mustReserve(t, m, 100, Lazy) // past the plan: lent, lazily
	}
	require.Equal(t, 0, locate(t, b, mustReserve(t, b, 10000, Eager)).pool, "the arena's room")
	sa.refuse = 1
	_, err := a.Reserve(10000, Eager)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.NotErrorIs(t, err, vkruntime.ErrBufferTooBig)
}
