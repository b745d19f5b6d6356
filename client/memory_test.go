package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/internal/envtest"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
	"github.com/vkrt/vkrt/runtime/environment"
)

func u64(v uint64) *uint64 { return &v }

func TestInstallMemoryPools(t *testing.T) {
	c := openClient(t)
	ctx := context.Background()
	capped := memory.SlicedLayout(memory.SlicedPool{PageSize: 1 << 20, Pages: u64(2)})
	byDefault := memory.VirtualLayout(memory.VirtualPlan{})

	// InvalidLayout: nothing changes.
	err := c.InstallMemoryPools(ctx, memory.SlicedLayout())
	var ie *memory.InstallError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, memory.InvalidLayout, ie.Kind)
	require.False(t, ie.Transient())
	require.ErrorContains(t, err, "client: stream 0: installing layout "+memory.SlicedLayout().Brief()+": the pool layout cannot be honoured: ")
	require.True(t, c.Layout().Equal(byDefault))
	err = c.DefaultStream().InstallMemoryPools(memory.SlicedLayout())
	require.ErrorIs(t, err, &memory.InstallError{Kind: memory.InvalidLayout})
	require.ErrorContains(t, err, "client: stream 0: installing layout ", "a stream's install says so too")

	// PoolsInUse while a dynamic buffer lives: transient, old layout kept.
	b, err := c.Empty(ctx, 1000)
	require.NoError(t, err)
	err = c.InstallMemoryPools(ctx, capped)
	require.ErrorAs(t, err, &ie)
	require.Equal(t, memory.PoolsInUse, ie.Kind)
	require.True(t, ie.Transient())
	require.Equal(t, uint64(1000), ie.BytesInUse)
	// In the client's words, as its other errors are: the stream and the
	// layout, then the pools' own.
	require.Equal(t, "client: stream 0: installing layout "+capped.Brief()+": 1000 B still live in the pools, in 1 reservation", err.Error())
	require.True(t, c.DefaultStream().Layout().Equal(byDefault))
	require.True(t, c.Layout().Equal(byDefault))
	got, err := b.Read(ctx)
	require.NoError(t, err, "the live buffer is undisturbed")
	require.Len(t, got, 1000)

	// Once it is freed the layout installs, and new streams get it.
	require.NoError(t, b.Free())
	require.NoError(t, c.InstallMemoryPools(ctx, capped))
	require.True(t, c.DefaultStream().Layout().Equal(capped))
	s, err := c.NewStream()
	require.NoError(t, err)
	require.True(t, s.Layout().Equal(capped))
	rep := s.Report()
	require.Len(t, rep.Dynamic, 1)
	require.Equal(t, memory.SlicedKind{PageSize: 1 << 20, MaxSliceSize: 1 << 20, MaxPoolSize: u64(2 << 20)}, rep.Dynamic[0].Kind)

	// StreamUnavailable: a stream in an error state keeps its pools, the
	// layout still applies to streams created afterwards.
	s.mu.Lock()
	s.fail(fmt.Errorf("queue submit: %w", vkruntime.ErrDeviceLost))
	s.mu.Unlock()
	direct := memory.DirectLayout()
	// A layout no stream can be built with on this storage (a page past
	// its largest allocation, which Layout.Validate cannot know) is
	// refused as a healthy stream refuses it, not kept for new streams,
	// which then all failed.
	tooLarge := memory.SlicedLayout(memory.SlicedPool{PageSize: c.Device().Storage().MaxAllocationSize() + 256})
	require.NoError(t, tooLarge.Validate(c.Properties()))
	err = c.InstallMemoryPools(WithStream(ctx, s), tooLarge)
	require.ErrorAs(t, err, &ie)
	require.Equal(t, memory.InvalidLayout, ie.Kind, "%v", err)
	require.True(t, c.Layout().Equal(capped))
	_, err = c.NewStream()
	require.NoError(t, err)
	err = c.InstallMemoryPools(WithStream(ctx, s), direct)
	require.ErrorAs(t, err, &ie)
	require.Equal(t, memory.StreamUnavailable, ie.Kind)
	require.Equal(t, fmt.Sprintf("client: stream %d: installing layout %s: the calling stream is in an error state", s.ID(), direct.Brief()), err.Error())
	require.ErrorIs(t, err, &memory.InstallError{Kind: memory.StreamUnavailable})
	require.True(t, s.Layout().Equal(capped))
	require.True(t, c.Layout().Equal(direct))
	_, err = s.Empty(ctx, 16)
	require.ErrorIs(t, err, vkruntime.ErrDeviceLost, "a failed stream refuses work with its cause")
	require.ErrorIs(t, s.Err(), vkruntime.ErrDeviceLost)
	require.NoError(t, c.DefaultStream().Err(), "other streams carry on")
	fresh, err := c.NewStream()
	require.NoError(t, err)
	require.True(t, fresh.Layout().Equal(direct))
	require.Equal(t, memory.DirectKind{}, fresh.Report().Dynamic[0].Kind)
}

// Without a plan or a layout a client gets what vkrt replay measures by
// default: the Virtual layout, one virtual range bound under live buffers
// where the device has sparse residency, the SubSlices pools where not.
func TestDefaultLayoutIsVirtualAndNeedsNoPlan(t *testing.T) {
	ctx := context.Background()
	byDefault := memory.VirtualLayout(memory.VirtualPlan{})
	// use makes and frees buffers of a few sizes and reads the largest back.
	use := func(t *testing.T, c *Client) memory.Report {
		data := make([]byte, 300<<10)
		for i := range data {
			data[i] = byte(i * 7)
		}
		small, err := c.Empty(ctx, 1000)
		require.NoError(t, err)
		big, err := c.Create(ctx, data)
		require.NoError(t, err)
		require.NoError(t, small.Free())
		got, err := big.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, data, got)
		rep := c.MemoryReport(ctx)
		require.NoError(t, big.Free())
		return rep
	}
	t.Run("sparse residency", func(t *testing.T) {
		const granule = 64 << 10
		c := openOnCPU(t, []cpu.Option{cpu.WithSparseGranule(granule)})
		require.True(t, c.Layout().Equal(byDefault))
		rep := use(t, c)
		require.Len(t, rep.Dynamic, 1, "one virtual range takes every size")
		kind, ok := rep.Dynamic[0].Kind.(memory.VirtualKind)
		require.True(t, ok, "the pool is virtual: %v", rep.Dynamic[0].Kind)
		require.Equal(t, uint64(granule), kind.GranuleSize)
		require.Zero(t, kind.PlannedBytes, "no plan was needed")
		stats := c.StorageStats()
		require.Positive(t, stats.BindCalls, "device memory was bound under the buffers")
		// 1000 B and 300 KiB live at once: one device allocation of the
		// pool's unit holds them.
		require.Equal(t, uint64(1), stats.Allocs)
		require.Equal(t, uint64(memory.VirtualChunkUnit), stats.BytesPeak, "one unit of device memory, taken once")
	})
	t.Run("no sparse residency", func(t *testing.T) {
		reports := make([]memory.Report, 2)
		for i, opts := range [][]Option{nil, {WithLayout(memory.SubSlicesLayout())}} {
			c := openOnCPU(t, nil, opts...)
			reports[i] = use(t, c)
			if i == 0 {
				require.True(t, c.Layout().Equal(byDefault), "the layout asked stays the default")
				require.Zero(t, c.StorageStats().BindCalls)
			}
		}
		require.NotEmpty(t, reports[0].Dynamic)
		for _, p := range reports[0].Dynamic {
			_, virtual := p.Kind.(memory.VirtualKind)
			require.False(t, virtual, "a storage without sparse residency has no virtual range: %v", p.Kind)
		}
		require.Equal(t, reports[1], reports[0], "the very pools of the SubSlices layout")
	})
}

func TestPersistentWindow(t *testing.T) {
	c := openClient(t)
	ctx := context.Background()
	// A nil function is an error, and opens no window: it panicked inside
	// one.
	err := c.Persistent(ctx, nil)
	require.ErrorIs(t, err, ErrNilFunction)
	require.EqualError(t, err, "client: nil function: Persistent was given none to run in the window")
	require.False(t, c.DefaultStream().mgr.InPersistent(), "no window left open")
	var weights *Buffer
	require.NoError(t, c.Persistent(ctx, func(ctx context.Context) error {
		var err error
		weights, err = c.Create(ctx, make([]byte, 3000))
		return err
	}))
	act, err := c.Empty(ctx, 500)
	require.NoError(t, err)
	rep := c.MemoryReport(ctx)
	require.Equal(t, uint64(1), rep.Persistent.Usage.NumberAllocs)
	require.Equal(t, uint64(3000), rep.Persistent.Usage.BytesInUse)
	require.Equal(t, uint64(500), rep.Usage().BytesInUse-rep.Persistent.Usage.BytesInUse)
	require.NoError(t, act.Free())
	// The persistent buffer does not hold the dynamic pools.
	require.NoError(t, c.InstallMemoryPools(ctx, memory.ExclusivePagesLayout()))
	got, err := weights.Read(ctx)
	require.NoError(t, err)
	require.Len(t, got, 3000)
	wantErr := errors.New("stop")
	require.ErrorIs(t, c.Persistent(ctx, func(context.Context) error { return wantErr }), wantErr)
}

func TestRecordMemory(t *testing.T) {
	env, err := environment.Open("records", environment.WithDir(t.TempDir()))
	require.NoError(t, err)
	defer env.Close()
	c := openClient(t, UseEnvironment(env))
	ctx := context.Background()
	b, err := c.Empty(ctx, 12345)
	require.NoError(t, err)
	s, err := c.NewStream()
	require.NoError(t, err)
	_, err = s.Empty(ctx, 77)
	require.NoError(t, err)

	e1, err := c.RecordMemory(ctx, "one buffer")
	require.NoError(t, err)
	require.Equal(t, environment.KindMemory, e1.Kind)
	e2, err := c.RecordMemory(WithStream(ctx, s), "other stream")
	require.NoError(t, err)
	require.NoError(t, b.Free())

	// Both listings are checked against what was recorded, each on its own.
	check := func(how string, recs []environment.Typed[MemoryRecord]) {
		t.Helper()
		require.Len(t, recs, 2, how)
		require.Equal(t, e1.ID, recs[0].ID, how)
		require.Equal(t, "one buffer", recs[0].Value.Label, how)
		require.Equal(t, uint64(12345), recs[0].Value.Report.Usage().BytesInUse, how)
		require.Equal(t, e2.ID, recs[1].ID, how)
		require.Equal(t, "other stream", recs[1].Value.Label, how)
		require.Equal(t, uint64(77), recs[1].Value.Report.Usage().BytesInUse, how)
		require.Equal(t, s.Report(), recs[1].Value.Report, "%s: the record reads back as the report it was", how)
		require.Contains(t, string(recs[0].Body), `"label":"one buffer","report":{"dynamic":[`, how)
	}
	recs, err := MemoryRecords(ctx, env, environment.Query{})
	require.NoError(t, err)
	check("at once", recs)
	var each []environment.Typed[MemoryRecord]
	require.NoError(t, EachMemoryRecord(ctx, env, environment.Query{}, func(r environment.Typed[MemoryRecord]) error {
		each = append(each, r)
		return nil
	}))
	check("one at a time", each)

	_, err = c.RecordMemory(ctx, "")
	require.ErrorIs(t, err, environment.ErrInvalidRecord)
}

func TestRecordMemoryOpensDefaultEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(environment.DirEnvVar, dir)
	c := openClient(t)
	// A record refused for its label opens nothing.
	_, err := c.RecordMemory(context.Background(), "")
	require.ErrorIs(t, err, environment.ErrInvalidRecord)
	names, err := environment.List(environment.WithDir(dir))
	require.NoError(t, err)
	require.Empty(t, names, "a refused record leaves no default environment")
	_, err = c.RecordMemory(context.Background(), "first record")
	require.NoError(t, err)
	names, err = environment.List(environment.WithDir(dir))
	require.NoError(t, err)
	require.Equal(t, []string{environment.DefaultName}, names, "the default environment opens at the first record")
}

func TestRecordMemoryOpensNamedEnvironment(t *testing.T) {
	dir := t.TempDir()
	c := openClient(t, WithEnvironment("named", environment.WithDir(dir)))
	_, err := c.RecordMemory(context.Background(), "idle")
	require.NoError(t, err)
	env, err := environment.Open("named", environment.WithDir(dir), environment.WithoutCreate())
	require.NoError(t, err)
	defer env.Close()
	recs, err := MemoryRecords(context.Background(), env, environment.Query{LabelGlob: "idle"})
	require.NoError(t, err)
	require.Len(t, recs, 1)
}

// WithEnvironment("") is an error of Open, as any invalid name is: it
// recorded into the default environment.
func TestAnEmptyEnvironmentNameIsAnErrorOfOpen(t *testing.T) {
	dir := t.TempDir()
	d, err := cpu.New()
	require.NoError(t, err)
	_, err = Open(context.Background(), WithBackend(d), WithEnvironment("", environment.WithDir(dir)))
	require.ErrorIs(t, err, environment.ErrInvalidName)
	names, err := environment.List(environment.WithDir(dir))
	require.NoError(t, err)
	require.Empty(t, names)
	// UseEnvironment after it is no name at all.
	env, err := environment.Open("given", environment.WithDir(dir))
	require.NoError(t, err)
	defer env.Close()
	c := openOnCPU(t, nil, WithEnvironment(""), UseEnvironment(env))
	require.NotNil(t, c)
}

// UseEnvironment(nil) fails Open with ErrInvalidOption and closes the
// device handed to it: the client recorded into the default environment,
// which the caller, handing an environment, did not ask for. A
// WithEnvironment after it replaces it, as any later option does.
func TestUseEnvironmentNilIsAnErrorOfOpen(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(environment.DirEnvVar, dir)
	d, err := cpu.New()
	require.NoError(t, err)
	c, err := Open(context.Background(), WithBackend(d), UseEnvironment(nil))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "UseEnvironment was given no environment (nil)")
	require.Nil(t, c)
	requireClosed(t, d, "a failed Open closes the handed device")
	names, err := environment.List()
	require.NoError(t, err)
	require.Empty(t, names, "no default environment is made")

	c = openOnCPU(t, nil, UseEnvironment(nil), WithEnvironment("named", environment.WithDir(dir)))
	_, err = c.RecordMemory(context.Background(), "x")
	require.NoError(t, err)
	names, err = environment.List()
	require.NoError(t, err)
	require.Equal(t, []string{"named"}, names)
}

// A record whose environment's file was removed under the client fails
// with environment.ErrReplaced (it went into the removed file before), and
// the next record opens the environment again, creating its file anew.
func TestRecordMemoryAfterTheFileIsRemovedOpensItAgain(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openOnCPU(t, nil, WithEnvironment("removed", environment.WithDir(dir)))
	_, err := c.RecordMemory(ctx, "before")
	require.NoError(t, err)
	path, err := environment.Path("removed", environment.WithDir(dir))
	require.NoError(t, err)
	// Removing the file fails the next record and the one after opens it
	// again.
	removeThenRecord := func() {
		t.Helper()
		for _, side := range []string{"", "-wal", "-shm"} {
			require.NoError(t, os.Remove(path+side))
		}
		_, err := c.RecordMemory(ctx, "lost")
		require.ErrorIs(t, err, environment.ErrReplaced)
		_, err = c.RecordMemory(ctx, "after")
		require.NoError(t, err)
	}
	removeThenRecord()
	env, err := environment.Open("removed", environment.WithDir(dir), environment.ReadOnly())
	require.NoError(t, err)
	defer env.Close()
	recs, err := MemoryRecords(ctx, env, environment.Query{})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "after", recs[0].Label)

	// The environments it dropped are closed, not kept until the client
	// closes: a file removed again and again costs no descriptors.
	openFiles := func() int {
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("no /proc/self/fd to count open files: %v", err)
		}
		return len(fds)
	}
	before := openFiles()
	for range 20 {
		removeThenRecord()
	}
	require.LessOrEqual(t, openFiles(), before+3, "open files after 20 removals")
}

func TestOutOfMemory(t *testing.T) {
	const limit = 12 << 20
	// Sliced pools keep their free pages until an explicit cleanup, so the
	// only way past the limit below is the cleanup before the retry.
	layout := memory.SlicedLayout(
		memory.SlicedPool{PageSize: 2 << 20},
		memory.SlicedPool{PageSize: 8 << 20},
	)
	c := openClient(t, WithMemoryLimit(limit), WithLayout(layout))
	ctx := context.Background()
	storage := c.Device().Storage()

	other, err := c.NewStream()
	require.NoError(t, err)
	small, err := other.Empty(ctx, 100<<10)
	require.NoError(t, err)
	var bufs []*Buffer
	for range 3 {
		b, err := c.Empty(ctx, 2<<20)
		require.NoError(t, err)
		bufs = append(bufs, b)
	}
	for _, b := range bufs {
		require.NoError(t, b.Free())
	}
	require.Equal(t, uint64(8<<20), storage.Allocated(), "the freed pages are still held")
	big, err := c.Empty(ctx, 7<<20)
	require.NoError(t, err, "the cleanup before the retry makes room")
	require.Equal(t, uint64(10<<20), storage.Allocated())

	// A request that cannot fit even after the cleanup names everything.
	_, err = c.Empty(ctx, 6<<20)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	var ae *AllocationError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, uint64(6<<20), ae.Size)
	require.Equal(t, vkruntime.StreamID(0), ae.Stream)
	require.Equal(t, []LiveAllocation{
		{Buffer: big.ID(), Stream: 0, Size: 7 << 20},
		{Buffer: small.ID(), Stream: 1, Size: 100 << 10},
	}, ae.Largest)
	require.Equal(t, uint64(7<<20), ae.Pools.Usage().BytesInUse)
	require.Equal(t, uint64(8<<20), ae.Pools.Usage().BytesReserved)
	require.True(t, ae.Layout.Equal(layout))
	var oom *vkruntime.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	require.Equal(t, uint64(limit), oom.Limit)
	msg := err.Error()
	require.Contains(t, msg, "6291456 B (6.29 MB) could not be allocated after a cleanup")
	require.Contains(t, msg, fmt.Sprintf("buffer %d on stream 0 (7.34 MB), buffer %d on stream 1 (102.40 KB)", big.ID(), small.ID()))
	require.Contains(t, msg, "the stream's pools hold 8.39 MB reserved, 7.34 MB in 1 live allocation,")
	require.Contains(t, msg, "under layout "+layout.String())
	require.Contains(t, msg, "limit 12582912 B")
	require.Equal(t, uint64(10<<20), storage.Allocated(), "the failed request holds nothing")

	// A capped pool that is full is retried and reported the same way.

	capped := memory.SlicedLayout(memory.SlicedPool{PageSize: 1 << 20, Pages: u64(1)})
	s, err := c.newStream(&capped)
	require.NoError(t, err)
	_, err = s.Empty(ctx, 600<<10)
	require.NoError(t, err)
	_, err = s.Empty(ctx, 600<<10)
	require.ErrorIs(t, err, vkruntime.ErrPoolCapacityExceeded)
	require.ErrorAs(t, err, &ae)
	require.Equal(t, uint64(600<<10), ae.Size)
	// The refusal follows without naming the stream and size again.
	msg = err.Error()
	require.Equal(t, 1, strings.Count(msg, "client: "), msg)
	require.NotContains(t, msg, "buffer of", msg)
	require.Contains(t, msg, " (102.40 KB): vkrt: pool capacity exceeded: asked 614400 B", msg)
}

// A buffer that the device memory left holds, but not the page its pool
// would open for it, was refused after the cleanup. The retry now gives it
// an allocation of its own size.
func TestTheRetryGivesABufferAnAllocationOfItsOwnSize(t *testing.T) {
	ctx := context.Background()
	c := openClient(t, WithMemoryLimit(16<<20), WithLayout(memory.SubSlicesLayout()))
	storage := c.Device().Storage()
	big, err := c.Empty(ctx, 9<<20)
	require.NoError(t, err)
	require.Equal(t, uint64(9<<20), storage.Allocated())
	b, err := c.Empty(ctx, 3<<20) // a slice of a 16 MiB page, which does not fit
	require.NoError(t, err)
	require.Equal(t, uint64(12<<20), storage.Allocated())
	want := bytes.Repeat([]byte{7}, 1000)
	require.NoError(t, b.Write(ctx, 3<<20-1000, want))
	got, err := b.Stream().ReadAt(ctx, b, 3<<20-1000, 1000)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.NoError(t, b.Free())
	require.NoError(t, big.Free())
}

// A buffer made in a dry run and given memory later, as a guest with a
// quota makes its buffers, gets the same retry: its page was chosen when
// it was made, and the retry moves it to an allocation of its own size.
func TestTheRetryGivesADryRunBufferAnAllocationOfItsOwnSize(t *testing.T) {
	ctx := context.Background()
	c := openClient(t, WithMemoryLimit(16<<20), WithLayout(memory.SubSlicesLayout()))
	big, err := c.Empty(ctx, 9<<20)
	require.NoError(t, err)
	b, err := c.Empty(dryrun.With(ctx), 3<<20)
	require.NoError(t, err)
	require.NoError(t, b.Stream().Back(ctx, b))
	require.Equal(t, uint64(12<<20), c.Device().Storage().Allocated())
	got, err := b.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 3<<20), got, "a new buffer reads as zeros")
	require.NoError(t, b.Free())
	require.NoError(t, big.Free())
}

func TestMemoryLimitSizesPresets(t *testing.T) {
	// The default preset's pages are sized by the limit, not the heap, so a
	// buffer well under the limit fits.
	ctx := context.Background()
	c := openClient(t, WithMemoryLimit(8<<20))
	require.Equal(t, uint64(8<<20), c.Properties().MemorySize)
	for _, p := range c.MemoryReport(ctx).Dynamic {
		if k, ok := p.Kind.(memory.SlicedKind); ok {
			require.LessOrEqual(t, k.PageSize, uint64(8<<20))
		}
	}
	b, err := c.Empty(ctx, 3<<20)
	require.NoError(t, err)
	require.NoError(t, b.Free())
	require.LessOrEqual(t, c.Device().Storage().Allocated(), uint64(8<<20))
}

// Every stream's virtual pool has ranges of the device's sparse address
// space, which they share (1 TiB on an H200): all of them serve buffers at
// once.
func TestStreamsShareTheSparseAddressSpace(t *testing.T) {
	ctx := context.Background()
	c := openOnCPU(t, []cpu.Option{cpu.WithSparseGranule(64 << 10), cpu.WithMemorySize(150e9)})
	var buffers []*Buffer
	for i := range 6 {
		s, err := c.NewStream()
		require.NoError(t, err)
		data := bytes.Repeat([]byte{byte(i + 1)}, 5000)
		b, err := s.Create(ctx, data)
		require.NoError(t, err, "stream %d", i)
		buffers = append(buffers, b)
	}
	for i, b := range buffers {
		got, err := b.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, bytes.Repeat([]byte{byte(i + 1)}, 5000), got, "stream %d keeps its own bytes", i)
		require.NoError(t, b.Free())
	}
}

// A stream whose buffers outgrow its first virtual range (a fourth of the
// heap: here of a 16 MiB memory limit) places them in more ranges; every
// buffer keeps its bytes, and memory freed in one range serves buffers in
// another.
func TestBuffersSpreadOverVirtualRanges(t *testing.T) {
	ctx := context.Background()
	c := openOnCPU(t, []cpu.Option{cpu.WithSparseGranule(64 << 10)}, WithMemoryLimit(16<<20))
	contents := func(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8), 7}, 1<<20/3) }
	live := map[int]*Buffer{}
	create := func(i int) {
		b, err := c.Create(ctx, contents(i))
		require.NoError(t, err, "buffer %d", i)
		live[i] = b
	}
	checkAll := func(when string) {
		for i, b := range live {
			got, err := b.Read(ctx)
			require.NoError(t, err)
			require.Equal(t, contents(i), got, "%s: buffer %d keeps its bytes", when, i)
		}
	}
	for i := range 12 { // 12 MiB: ranges of 4, 4 and 8 MiB
		create(i)
	}
	checkAll("spread")
	for _, i := range []int{0, 1, 2, 5, 6} {
		require.NoError(t, live[i].Free())
		delete(live, i)
	}
	for i := 12; i < 16; i++ {
		create(i)
	}
	checkAll("after rebinding")
	require.LessOrEqual(t, c.MemoryReport(ctx).Usage().BytesReserved, uint64(16<<20))
}

// A stream's MemoryCleanup returns its own free pages and leaves another
// stream's alone; the client's cleans both.
func TestStreamMemoryCleanupIsTheStreamsOwn(t *testing.T) {
	ctx := context.Background()
	c := openOnCPU(t, nil)
	var streams [2]*Stream
	for i := range streams {
		s, err := c.NewStream()
		require.NoError(t, err)
		b, err := s.Empty(ctx, 1<<20)
		require.NoError(t, err)
		require.NoError(t, b.Free())
		require.Positive(t, s.Usage().BytesReserved, "stream %d keeps its free page", i)
		streams[i] = s
	}
	held := c.Device().Storage().Allocated()
	kept := streams[1].Usage().BytesReserved
	streams[0].MemoryCleanup()
	require.Zero(t, streams[0].Usage().BytesReserved)
	require.Equal(t, kept, streams[1].Usage().BytesReserved, "the other stream's page stays")
	require.Less(t, c.Device().Storage().Allocated(), held)
	c.MemoryCleanup(ctx)
	require.Zero(t, streams[1].Usage().BytesReserved)
	require.NoError(t, streams[1].Close())
	streams[1].MemoryCleanup() // closed: nothing to do, no panic
}

// A first record waits for the environment while another writer holds its
// lock (up to the busy timeout); the client's other work does not wait
// with it. The open held the client's lock, so a stream made meanwhile (a
// guest starting on the same host) took 9.8 s, until the record gave up.
func TestOpeningTheEnvironmentHoldsUpNothingElse(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(environment.DirEnvVar, dir)
	env, err := environment.Open(environment.DefaultName)
	require.NoError(t, err)
	path := env.Path()
	require.NoError(t, env.Close())
	release := envtest.HoldWriteLock(t, path)

	c := openOnCPU(t, sparse)
	recorded := make(chan error, 1)
	go func() { _, err := c.RecordMemory(context.Background(), "waits"); recorded <- err }()
	time.Sleep(200 * time.Millisecond) // the record is waiting for the lock
	start := time.Now()
	s, err := c.NewStream()
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NotEmpty(t, c.Streams())
	took := time.Since(start)
	select {
	case err := <-recorded:
		t.Fatalf("the record did not wait for the other writer: %v", err)
	default:
	}
	require.NoError(t, release())
	require.NoError(t, <-recorded, "the record is written once the other writer is done")
	require.Less(t, took, time.Second, "a stream made while the record waited")
}

// RecordMemory's refusals say "client:" first, as every other error of
// the client does, and still match the environment's kinds: a label the
// environment refuses, a write it refuses.
func TestRecordMemoryErrorsSayClient(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openOnCPU(t, nil, WithEnvironment("rec", environment.WithDir(dir)))
	_, err := c.RecordMemory(ctx, "")
	require.ErrorIs(t, err, environment.ErrInvalidRecord)
	require.True(t, strings.HasPrefix(err.Error(), "client: recording memory: "), "%v", err)

	given, err := environment.Open("given", environment.WithDir(dir))
	require.NoError(t, err)
	c = openOnCPU(t, nil, UseEnvironment(given))
	require.NoError(t, given.Close()) // the caller's, closed under the client
	_, err = c.RecordMemory(ctx, "x")
	require.ErrorIs(t, err, environment.ErrClosed)
	require.True(t, strings.HasPrefix(err.Error(), "client: recording memory: "), "%v", err)
	require.Equal(t, 1, strings.Count(err.Error(), "client: "), "%v", err)
}

// An environment opened read-only, given with UseEnvironment or opened by
// WithEnvironment with environment.ReadOnly, fails Open with
// ErrInvalidOption and the handed device is closed: Open succeeded, and
// every RecordMemory then failed with environment.ErrReadOnly. The
// environment handed stays open, the caller's.
func TestAReadOnlyEnvironmentIsAnErrorOfOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w, err := environment.Open("ro", environment.WithDir(dir))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	r, err := environment.Open("ro", environment.WithDir(dir), environment.ReadOnly())
	require.NoError(t, err)
	defer r.Close()

	d, err := cpu.New()
	require.NoError(t, err)
	c, err := Open(ctx, WithBackend(d), UseEnvironment(r))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.EqualError(t, err, `client: invalid option: UseEnvironment was given environment "ro" opened read-only, which RecordMemory cannot write to`)
	require.Nil(t, c)
	requireClosed(t, d, "a failed Open closes the handed device")
	_, err = r.Kinds(ctx)
	require.NoError(t, err, "the environment handed is left open")

	d, err = cpu.New()
	require.NoError(t, err)
	c, err = Open(ctx, WithBackend(d), WithEnvironment("ro", environment.WithDir(dir), environment.ReadOnly()))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, `WithEnvironment was given environment "ro" opened read-only`)
	require.Nil(t, c)
	requireClosed(t, d, "a failed Open closes the handed device")

	// A later option replaces it, as any later option does.
	c = openOnCPU(t, nil, UseEnvironment(r), WithEnvironment("rw", environment.WithDir(dir)))
	_, err = c.RecordMemory(ctx, "x")
	require.NoError(t, err)
}

// A zero or closed environment given with UseEnvironment fails Open with
// ErrInvalidOption, and the handed device is closed: Open succeeded, and
// every RecordMemory then failed (environment.ErrNil, ErrClosed).
func TestAZeroOrClosedEnvironmentIsAnErrorOfOpen(t *testing.T) {
	ctx := context.Background()
	closed, err := environment.Open("closed", environment.WithDir(t.TempDir()))
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	for env, want := range map[*environment.Env]string{
		{}:     "client: invalid option: UseEnvironment was given a zero environment.Env, which environment.Open never returns",
		closed: `client: invalid option: UseEnvironment was given environment "closed", which is closed`,
	} {
		d, err := cpu.New()
		require.NoError(t, err)
		c, err := Open(ctx, WithBackend(d), UseEnvironment(env))
		require.ErrorIs(t, err, ErrInvalidOption, want)
		require.EqualError(t, err, want)
		require.Nil(t, c)
		requireClosed(t, d, "a failed Open closes the handed device")
	}
}

// A name or options WithEnvironment gave that the environment refuses (an
// invalid name, a nil option, an empty WithDir) fail Open with an error
// matching ErrInvalidOption, as the client's other invalid options do, as
// well as the environment's kind; the handed device is closed.
func TestEnvironmentOptionsRefusedAreInvalidOptions(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		opt  Option
		kind error
		want string
	}{
		{WithEnvironment("a/b", environment.WithDir(dir)), environment.ErrInvalidName, `client: environment: invalid name: "a/b" contains a path separator`},
		{WithEnvironment("a", environment.WithDir(dir), nil), environment.ErrInvalidOption,
			`client: environment "a": opening: invalid option: option 2 of the 2 given is nil`},
		{WithEnvironment("a", environment.WithDir("")), environment.ErrInvalidOption, `client: environment: invalid option: WithDir was given an empty directory`},
	} {
		d, err := cpu.New()
		require.NoError(t, err)
		c, err := Open(context.Background(), WithBackend(d), tc.opt)
		require.ErrorIs(t, err, ErrInvalidOption, tc.want)
		require.ErrorIs(t, err, tc.kind, tc.want)
		require.ErrorContains(t, err, tc.want)
		require.Nil(t, c)
		requireClosed(t, d, "a failed Open closes the handed device")
	}
	names, err := environment.List(environment.WithDir(dir))
	require.NoError(t, err)
	require.Empty(t, names)
}
