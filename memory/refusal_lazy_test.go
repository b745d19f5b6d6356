package memory_test

import (
	"log/slog"
	"testing"

	"github.com/goccy/go-json"
	"github.com/stretchr/testify/require"

	dryreplay "github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// lazyChunksPool is a Virtual pool on a 256 MiB device holding two chunks
// with no device memory, made by lazy reservations (a dry run's) since
// freed, and the storage; another stream's memory then leaves free bytes
// of the device free.
func lazyChunksPool(t *testing.T, free uint64) (*memory.Manager, *dryreplay.CountingStorage) {
	t.Helper()
	props := vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 16 << 20, MemorySize: 256 << 20}
	s := dryreplay.NewCountingStorage(props.MemorySize)
	s.Granule = 64 << 10
	m, err := memory.NewManager(s, props, memory.VirtualLayout(memory.VirtualPlan{}))
	require.NoError(t, err)
	m.SetLogger(slog.New(slog.DiscardHandler))
	a, err := m.Reserve(10<<20, memory.Lazy)
	require.NoError(t, err)
	b, err := m.Reserve(15<<20, memory.Lazy)
	require.NoError(t, err)
	require.NoError(t, m.Free(a))
	require.NoError(t, m.Free(b))
	rep := m.Report().Dynamic[0]
	require.Equal(t, uint64(2), rep.PagesUnmapped)
	require.Equal(t, rep.Pages, rep.PagesUnmapped, "the lazy chunks hold no device memory")
	require.Zero(t, s.Counts().BytesHeld)
	if free < props.MemorySize {
		_, err = s.Alloc(props.MemorySize - free)
		require.NoError(t, err)
	}
	return m, s
}

// requireUnchanged asserts that a refused call (err) left the pools'
// report and the device memory they hold as before.
func requireUnchanged(t *testing.T, m *memory.Manager, s *dryreplay.CountingStorage, before memory.Report, held uint64, err error) {
	t.Helper()
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	b, _ := json.Marshal(before)
	a, _ := json.Marshal(m.Report())
	require.JSONEq(t, string(b), string(a), "the refusal changed the report")
	require.Equal(t, held, s.Counts().BytesHeld, "the refusal left device memory taken")
}

// An eager reservation over two chunks with no device memory, the second
// of which the device refuses, changes nothing: the first got 20 MiB of
// device memory for the reservation and kept it (pages_unmapped 2 → 1).
func TestARefusedReservationLeavesLazyChunksUnmapped(t *testing.T) {
	m, s := lazyChunksPool(t, 25<<20)
	before, held := m.Report(), s.Counts().BytesHeld
	_, err := m.Reserve(30<<20, memory.Eager)
	requireUnchanged(t, m, s, before, held, err)
}

// So does a refused resolve of a lazy reservation over both.
func TestARefusedResolveLeavesLazyChunksUnmapped(t *testing.T) {
	m, s := lazyChunksPool(t, 256<<20)
	h, err := m.Reserve(30<<20, memory.Lazy)
	require.NoError(t, err)
	_, err = s.Alloc(256<<20 - 25<<20)
	require.NoError(t, err)
	before, held := m.Report(), s.Counts().BytesHeld
	_, err = m.Resolve(h)
	requireUnchanged(t, m, s, before, held, err)
}
