package faultstorage_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/faultstorage"
	"github.com/vkrt/vkrt/internal/tracetest"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
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

func openFaulty(t *testing.T, granule uint64, arm func(*faultstorage.Storage)) (*faultyDevice, *faultstorage.Storage) {
	t.Helper()
	var opts []cpu.Option
	if granule != 0 {
		opts = append(opts, cpu.WithSparseGranule(granule))
	}
	inner, err := cpu.New(opts...)
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
// logged is what the pools warned.
func runClientWorkload(t *testing.T, tr *trace.Trace, c faultCase, arm func(*faultstorage.Storage), armed string) (failures []error, s *faultstorage.Storage, logged string) {
	t.Helper()
	ctx := context.Background()
	dev, s := openFaulty(t, c.granule, arm)
	var log bytes.Buffer
	cl, err := client.Open(ctx, client.WithBackend(dev), client.WithLayout(c.layout), client.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	require.NoError(t, err, armed)
	live := map[int32]*client.Buffer{}
	for i, e := range tr.Events {
		switch e.Op {
		case trace.OpAlloc:
			size := e.Size/64 + 8
			injected := len(s.Injected())
			b, err := cl.Empty(ctx, size)
			if err != nil {
				require.Greater(t, len(s.Injected()), injected, "%s: event %d: Empty(%d) failed with no failure injected: %v", armed, i, size, err)
				failures = append(failures, err)
				// At most two calls fail in a row, and the client does not
				// retry every kind of call itself.
				for range 2 {
					if b, err = cl.Empty(ctx, size); err == nil {
						break
					}
					failures = append(failures, err)
				}
				require.NoError(t, err, "%s: event %d: the client is usable after failures", armed, i)
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
	// A refused Flush or unbind leaves releases for the next cleanup; at
	// most two fail in a row.
	for range 3 {
		cl.MemoryCleanup(ctx)
	}
	n, bytes, _ := s.Held()
	require.Zero(t, n, "%s: %d allocations (%d B) still held after every buffer was freed and memory cleaned up", armed, n, bytes)
	require.Zero(t, s.Stuck(), armed)
	require.Empty(t, s.Misuses(), armed)
	require.NoError(t, cl.Close(), armed)
	return failures, s, log.String()
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
	cases := []faultCase{
		{"sub-slices", memory.SubSlicesLayout(), 0},
		{"exclusive-pages", memory.ExclusivePagesLayout(), 0},
		{"direct", memory.DirectLayout(), 0},
		{"virtual", memory.VirtualLayout(memory.VirtualPlan{}), 64 << 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, clean, _ := runClientWorkload(t, tr, c, nil, "no failure")
			surfaced, heldRooms := 0, 0
			// One failure alone; then two in a row, so that an Alloc the
			// client retries after cleanup fails again and surfaces. The
			// retry is tight: a sliced page refused again gives way to an
			// allocation of the buffer's own size, a third Alloc, so the
			// SubSlices preset takes three in a row to surface, unless a
			// pool of larger buffers has the room in a page it holds.
			runs := []int{1, 2}
			if c.name == "sub-slices" {
				runs = append(runs, 3)
			}
			for _, op := range faultstorage.Ops {
				for _, run := range runs {
					for n := 1; n <= clean.Calls(op); n++ {
						armed := fmt.Sprintf("%s #%d (and %d after it) of %d", op, n, run-1, clean.Calls(op))
						failures, s, logged := runClientWorkload(t, tr, c, func(s *faultstorage.Storage) {
							for k := range run {
								s.FailNth(op, n+k, nil)
							}
						}, armed)
						require.NotEmpty(t, s.Injected(), armed)
						class, loud := errorClass[op]
						if !loud {
							require.Empty(t, failures, "%s fails silently", armed)
						}
						// The virtual pool tries smaller chunks before it gives up,
						// so two failures in a row may be absorbed there too; so
						// may they in the exclusive and direct pools, which hand
						// free pages back before they ask for a new one and map
						// them again when the device refuses: that Alloc takes
						// the second failure, and the client's retry succeeds.
						handsBack := c.name == "exclusive-pages" || c.name == "direct"
						heldRoom := strings.Contains(logged, "it takes free room in a page another pool holds")
						if op == faultstorage.Alloc && run == runs[len(runs)-1] && len(s.Injected()) == run && c.granule == 0 && !handsBack && !heldRoom {
							require.NotEmpty(t, failures, "%s: the client's retry failed too, so the failure surfaces", armed)
						}
						if heldRoom {
							heldRooms++
						}
						for _, err := range failures {
							require.True(t, errors.Is(err, class), "%s: surfaced as %v, not as %v", armed, err, class)
							if class == vkruntime.ErrOutOfDeviceMemory {
								var ae *client.AllocationError
								require.ErrorAs(t, err, &ae, "%s: the client says which allocation failed", armed)
							}
						}
						surfaced += len(failures)
					}
				}
			}
			t.Logf("%s: Alloc %d, Dealloc %d, Flush %d, ReserveVirtual %d, Bind %d calls failed, alone and two in a row; %d failures surfaced to Empty; %d runs took room in a larger pool's page",
				c.name, clean.Calls(faultstorage.Alloc), clean.Calls(faultstorage.Dealloc), clean.Calls(faultstorage.Flush),
				clean.Calls(faultstorage.ReserveVirtual), clean.Calls(faultstorage.Bind), surfaced, heldRooms)
		})
	}
}
