package faultstorage_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/faultstorage"
	"github.com/vkrt/vkrt/internal/tracetest"
	"github.com/vkrt/vkrt/memory"
)

// faultyDevice is the pure-Go device with its storage behind a
// faultstorage.Storage: every call the client's pools make reaches the
// real device unless the armed one fails.
type faultyDevice struct {
	device.Device
	storage faultyDeviceStorage
}

type faultyDeviceStorage struct {
	*faultstorage.Storage
	inner device.Storage
}

func (s faultyDeviceStorage) Allocated() uint64 { return s.inner.Allocated() }
func (s faultyDeviceStorage) Allocations() int  { return s.inner.Allocations() }
func (s faultyDeviceStorage) Limit() uint64     { return s.inner.Limit() }

func (d *faultyDevice) Storage() device.Storage { return d.storage }

func openFaulty(t *testing.T, arm func(*faultstorage.Storage)) (*faultyDevice, *faultstorage.Storage) {
	t.Helper()
	inner, err := cpu.Open(context.Background(), device.Config{})
	require.NoError(t, err)
	s := faultstorage.Wrap(inner.Storage())
	if arm != nil {
		arm(s)
	}
	return &faultyDevice{Device: inner, storage: faultyDeviceStorage{Storage: s, inner: inner.Storage()}}, s
}

// pattern is what buffer i holds: its index in every 8-byte word, so two
// buffers sharing memory would show.
func pattern(i int, size uint64) []byte {
	b := make([]byte, size)
	for o := uint64(0); o+8 <= size; o += 8 {
		binary.LittleEndian.PutUint64(b[o:], uint64(i)+1)
	}
	return b
}

// runClientWorkload drives the workload's shape (sizes scaled down so the
// pure-Go device holds them cheaply) through a client on a faulty device:
// each buffer is filled with its own pattern and checked when freed.
func runClientWorkload(t *testing.T, tr *trace.Trace, layout memory.Layout, arm func(*faultstorage.Storage), armed string) (failures []error, s *faultstorage.Storage) {
	t.Helper()
	ctx := context.Background()
	dev, s := openFaulty(t, arm)
	c, err := client.Open(ctx, client.WithBackend(dev), client.WithLayout(layout), client.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err, armed)
	live := map[int32]*client.Buffer{}
	for i, e := range tr.Events {
		switch e.Op {
		case trace.OpAlloc:
			size := e.Size/64 + 8
			injected := len(s.Injected())
			b, err := c.Empty(ctx, size)
			if err != nil {
				require.Greater(t, len(s.Injected()), injected, "%s: event %d: Empty(%d) failed with no failure injected: %v", armed, i, size, err)
				failures = append(failures, err)
				b, err = c.Empty(ctx, size)
				require.NoError(t, err, "%s: event %d: the client is usable after a failure", armed, i)
			}
			require.NoError(t, b.Write(ctx, 0, pattern(int(e.Index), size)), armed)
			live[e.Index] = b
		case trace.OpFree:
			b, ok := live[e.Index]
			if !ok {
				continue
			}
			got, err := b.Read(ctx)
			require.NoError(t, err, armed)
			require.Equal(t, pattern(int(e.Index), b.Size()), got, "%s: event %d: buffer %d lost its bytes", armed, i, e.Index)
			require.NoError(t, b.Free(), armed)
			delete(live, e.Index)
		}
	}
	for idx, b := range live {
		got, err := b.Read(ctx)
		require.NoError(t, err, armed)
		require.Equal(t, pattern(int(idx), b.Size()), got, "%s: buffer %d lost its bytes", armed, idx)
		require.NoError(t, b.Free(), armed)
	}
	c.MemoryCleanup(ctx)
	c.MemoryCleanup(ctx) // a Flush that failed leaves releases stuck until the next
	n, bytes, _ := s.Held()
	require.Zero(t, n, "%s: %d allocations (%d B) still held after every buffer was freed and memory cleaned up", armed, n, bytes)
	require.Zero(t, s.Stuck(), armed)
	require.Empty(t, s.Misuses(), armed)
	require.NoError(t, c.Close(), armed)
	return failures, s
}

// TestEveryStorageFailureThroughTheClientSurfacesAsItsClassAndLeaksNothing
// is the manager's test one level up: a client on the pure-Go device whose
// storage fails each call in turn. Buffers keep their bytes, the failure
// surfaces as its class (or is absorbed by the client's retry after
// cleanup), the client stays usable and nothing is left held.
func TestEveryStorageFailureThroughTheClientSurfacesAsItsClassAndLeaksNothing(t *testing.T) {
	full := workload(t)
	n := 400
	if tracetest.Quick() {
		n = 60
	}
	tr := &trace.Trace{Name: full.Name, Events: full.Events[:min(len(full.Events), n)]}
	for _, layout := range []memory.Layout{memory.SubSlicesLayout(), memory.ExclusivePagesLayout(), memory.DirectLayout()} {
		t.Run(layout.String(), func(t *testing.T) {
			_, clean := runClientWorkload(t, tr, layout, nil, "no failure")
			surfaced := 0
			for _, op := range []faultstorage.Op{faultstorage.Alloc, faultstorage.Dealloc, faultstorage.Flush} {
				// One failure alone; then two in a row, so that an Alloc the
				// client retries after cleanup fails again and surfaces.
				for _, run := range []int{1, 2} {
					for n := 1; n <= clean.Calls(op); n++ {
						armed := fmt.Sprintf("%s #%d (and %d after it) of %d", op, n, run-1, clean.Calls(op))
						failures, s := runClientWorkload(t, tr, layout, func(s *faultstorage.Storage) {
							for k := range run {
								s.FailNth(op, n+k, nil)
							}
						}, armed)
						require.NotEmpty(t, s.Injected(), armed)
						class, loud := errorClass[op]
						if !loud {
							require.Empty(t, failures, "%s fails silently", armed)
						}
						if loud && run == 2 && len(s.Injected()) == 2 {
							require.NotEmpty(t, failures, "%s: the client's retry failed too, so the failure surfaces", armed)
						}
						for _, err := range failures {
							require.True(t, errors.Is(err, class), "%s: surfaced as %v, not as %v", armed, err, class)
							var ae *client.AllocationError
							require.ErrorAs(t, err, &ae, "%s: the client says which allocation failed", armed)
						}
						surfaced += len(failures)
					}
				}
			}
			t.Logf("%s: Alloc %d, Dealloc %d, Flush %d calls failed one at a time; %d failures surfaced to Empty",
				layout, clean.Calls(faultstorage.Alloc), clean.Calls(faultstorage.Dealloc), clean.Calls(faultstorage.Flush), surfaced)
		})
	}
}
