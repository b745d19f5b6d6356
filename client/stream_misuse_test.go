package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/kernel"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
	"github.com/vkrt/vkrt/runtime/environment"
)

// sparse is the cpu device with sparse residency, so clients get the
// default Virtual layout.
var sparse = []cpu.Option{cpu.WithSparseGranule(64 << 10)}

// recordsEnv is an environment of the test's own and a count of its memory
// records.
func recordsEnv(t *testing.T) (*environment.Env, func() int) {
	t.Helper()
	env, err := environment.Open("streams", environment.WithDir(t.TempDir()))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, env.Close()) })
	return env, func() int {
		recs, err := MemoryRecords(context.Background(), env, environment.Query{})
		require.NoError(t, err)
		return len(recs)
	}
}

// A context naming a stream of another client is refused by every Client
// method acting on the calling stream, with a classified error naming the
// stream, and nothing of either client changes: no buffer, no layout, no
// record, no workload run. The other client's default stream is the nasty
// case, its id being this client's default stream's too.
func TestForeignCallingStreamIsRefused(t *testing.T) {
	env, records := recordsEnv(t)
	c := openOnCPU(t, sparse, UseEnvironment(env))
	other := openOnCPU(t, sparse)
	extra, err := other.NewStream()
	require.NoError(t, err)
	closedClient := openOnCPU(t, sparse)
	require.NoError(t, closedClient.Close())

	bg := context.Background()
	mine, err := c.Create(bg, []byte("mine, four words"))
	require.NoError(t, err)
	layout, report, stats := c.Layout(), c.MemoryReport(bg), c.StorageStats()
	otherUsage := other.MemoryUsage(bg)

	for _, foreign := range []*Stream{other.DefaultStream(), extra, closedClient.DefaultStream()} {
		what := fmt.Sprintf("stream %d of another client", foreign.ID())
		ctx := WithStream(bg, foreign)
		check := func(op string, err error) {
			t.Helper()
			require.ErrorIs(t, err, ErrForeignStream, "%s: %s", what, op)
			var fe *ForeignStreamError
			require.ErrorAs(t, err, &fe, "%s: %s", what, op)
			require.Equal(t, ForeignStreamError{Stream: foreign.ID()}, *fe, "%s: %s", what, op)
			require.EqualError(t, err, fmt.Sprintf("client: the context's stream %d belongs to another client", foreign.ID()))
		}
		s, err := c.CallingStream(ctx)
		check("CallingStream", err)
		require.Nil(t, s)
		b, err := c.Empty(ctx, 64)
		check("Empty", err)
		require.Nil(t, b)
		b, err = c.Create(ctx, []byte("data"))
		check("Create", err)
		require.Nil(t, b)
		check("Run", c.Run(ctx, kernel.FillWords(4, 7), mine))
		check("LaunchBatch", c.LaunchBatch(ctx, []LaunchOp{Op(kernel.FillWords(4, 7), mine)}))
		ran := false
		check("Persistent", c.Persistent(ctx, func(context.Context) error { ran = true; return nil }))
		require.False(t, ran, "%s: Persistent ran fn", what)
		check("InstallMemoryPools", c.InstallMemoryPools(ctx, memory.SubSlicesLayout()))
		_, err = c.RecordMemory(ctx, "foreign")
		check("RecordMemory", err)
		_, err = c.MeasurePlan(ctx, func(context.Context) error { ran = true; return nil }, MeasureOptions{})
		check("MeasurePlan", err)
		require.False(t, ran, "%s: MeasurePlan ran the workload", what)
		require.Zero(t, c.MemoryReport(ctx), "%s: no calling stream to report on, not the default's", what)
		require.Same(t, c.DefaultStream(), c.Stream(ctx), "Stream cannot refuse; it passes over the foreign stream")
	}

	require.True(t, c.Layout().Equal(layout))
	require.True(t, c.DefaultStream().Layout().Equal(layout))
	require.Equal(t, report, c.MemoryReport(bg))
	require.Equal(t, stats, c.StorageStats())
	require.Equal(t, otherUsage, other.MemoryUsage(bg))
	require.Zero(t, records())
	got, err := mine.Read(bg)
	require.NoError(t, err)
	require.Equal(t, "mine, four words", string(got))

	// A nil stream names none: the default stream calls.
	s, err := c.CallingStream(WithStream(bg, nil))
	require.NoError(t, err)
	require.Same(t, c.DefaultStream(), s)
}

// A closed stream of the client as the calling stream records nothing and
// measures nothing: its refusal is ErrClosed before the environment is
// written or the workload runs.
func TestClosedCallingStreamRecordsAndMeasuresNothing(t *testing.T) {
	env, records := recordsEnv(t)
	c := openOnCPU(t, sparse, UseEnvironment(env))
	s, err := c.NewStream()
	require.NoError(t, err)
	require.NoError(t, s.Close())
	ctx := WithStream(context.Background(), s)

	_, err = c.RecordMemory(ctx, "closed")
	require.ErrorIs(t, err, ErrClosed)
	require.NotErrorIs(t, err, vkruntime.ErrClosed, "the client is open")
	require.Zero(t, records())

	ran := false
	_, err = c.MeasurePlan(ctx, func(context.Context) error { ran = true; return nil }, MeasureOptions{})
	require.ErrorIs(t, err, ErrClosed)
	require.False(t, ran, "the workload ran for a plan with nowhere to go")

	_, err = c.RecordMemory(context.Background(), "the default stream")
	require.NoError(t, err)
	require.Equal(t, 1, records())

	// A closed stream is said to be closed whatever layout it is given.
	bad := memory.SlicedLayout(memory.SlicedPool{PageSize: 0})
	require.ErrorIs(t, s.InstallMemoryPools(bad), ErrClosed)
	require.ErrorIs(t, c.InstallMemoryPools(ctx, bad), ErrClosed)
}

// Freeing a buffer after its stream closed is ErrClosed, as every other use
// is, not ErrNotFound, which would say the caller freed it twice; a buffer
// of another stream is still refused as foreign.
func TestFreeAfterStreamCloseIsErrClosed(t *testing.T) {
	c := openOnCPU(t, sparse)
	ctx := context.Background()
	s, err := c.NewStream()
	require.NoError(t, err)
	b, err := s.Create(ctx, []byte("four"))
	require.NoError(t, err)
	theirs, err := c.Create(ctx, []byte("four"))
	require.NoError(t, err)
	require.NoError(t, s.Close())

	err = b.Free()
	require.ErrorIs(t, err, ErrClosed)
	require.NotErrorIs(t, err, vkruntime.ErrNotFound)
	require.ErrorIs(t, s.Free(theirs), ErrForeignBuffer)
	require.NoError(t, theirs.Free(), "the refusal left the buffer alone")

	kept, err := c.Create(ctx, []byte("four"))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	err = kept.Free()
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, err, vkruntime.ErrClosed, "closed with its client")
}

// Closing the default stream on its own is refused with a classified error
// and leaves it working.
func TestClosingTheDefaultStreamIsRefused(t *testing.T) {
	c := openOnCPU(t, nil)
	err := c.DefaultStream().Close()
	require.ErrorIs(t, err, ErrDefaultStream)
	require.EqualError(t, err, "client: the default stream closes with its client (stream 0)")
	b, err := c.Create(context.Background(), []byte("four"))
	require.NoError(t, err)
	require.NoError(t, b.Free())
}

// Streams lists open streams: none once the client is closed.
func TestClosedClientListsNoStreams(t *testing.T) {
	c := openOnCPU(t, nil)
	_, err := c.NewStream()
	require.NoError(t, err)
	require.Len(t, c.Streams(), 2)
	require.NoError(t, c.Close())
	require.Empty(t, c.Streams())
}

// Records racing Close either land or are ErrClosed: Close waits for a
// record in flight before closing the environment it opened, rather than
// leaving it to fail on a closed database with an error of no class.
func TestRecordMemoryRacingCloseIsErrClosed(t *testing.T) {
	for round := range 40 {
		d, err := cpu.New()
		require.NoError(t, err)
		c, err := Open(context.Background(), WithBackend(d), WithEnvironment("race", environment.WithDir(t.TempDir())))
		require.NoError(t, err)
		errs := make(chan error, 8)
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				for {
					if _, err := c.RecordMemory(context.Background(), "racing"); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Go(func() { errs <- c.Close() })
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil && !errors.Is(err, ErrClosed) {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}

// closeOrderDevice is the cpu device with a storage that notes any call
// into it made after, or still running at, the device's Close, and that can
// hold one Dealloc until told to go on.
type closeOrderDevice struct {
	*cpu.Device
	st *closeOrderStorage
}

func (d *closeOrderDevice) Storage() device.Storage { return d.st }

func (d *closeOrderDevice) Close() error {
	d.st.mu.Lock()
	if d.st.inFlight > 0 {
		d.st.late = append(d.st.late, "Close while a storage call ran")
	}
	d.st.closed = true
	d.st.mu.Unlock()
	return d.Device.Close()
}

type closeOrderStorage struct {
	device.Storage
	mu       sync.Mutex
	inFlight int
	closed   bool
	late     []string
	hold     chan struct{} // when set, the next Dealloc closes entered and waits for hold
	entered  chan struct{}
}

func (s *closeOrderStorage) call(what string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.late = append(s.late, what+" after Close")
	}
	s.inFlight++
	return func() { s.mu.Lock(); s.inFlight--; s.mu.Unlock() }
}

func (s *closeOrderStorage) Dealloc(id vkruntime.StorageID) {
	defer s.call("Dealloc")()
	s.mu.Lock()
	hold, entered := s.hold, s.entered
	s.hold = nil
	s.mu.Unlock()
	if hold != nil {
		close(entered)
		<-hold
	}
	s.Storage.Dealloc(id)
}

func (s *closeOrderStorage) Flush() {
	defer s.call("Flush")()
	s.Storage.Flush()
}

// A stream closing on its own while its client closes finishes handing its
// pages back before the device closes: the device is told nothing after
// its Close, which comes last, as device.Device asks. (A few rounds: a
// client that does not wait loses the race to the stream nearly always,
// not always.)
func TestClientCloseWaitsForAStreamClosing(t *testing.T) {
	for round := range 3 {
		d, err := cpu.New()
		require.NoError(t, err)
		st := &closeOrderStorage{Storage: d.Storage()}
		c, err := Open(context.Background(), WithBackend(&closeOrderDevice{Device: d, st: st}))
		require.NoError(t, err)
		s, err := c.NewStream()
		require.NoError(t, err)
		_, err = s.Create(context.Background(), make([]byte, 4096))
		require.NoError(t, err)

		hold, entered := make(chan struct{}), make(chan struct{})
		st.mu.Lock()
		st.hold, st.entered = hold, entered
		st.mu.Unlock()
		var wg sync.WaitGroup
		wg.Go(func() { require.NoError(t, s.Close()) })
		<-entered // the stream is handing its page back
		wg.Go(func() { require.NoError(t, c.Close()) })
		time.Sleep(20 * time.Millisecond) // room for a Close that does not wait
		close(hold)
		wg.Wait()
		st.mu.Lock()
		require.True(t, st.closed, "round %d", round)
		require.Empty(t, st.late, "round %d", round)
		st.mu.Unlock()
	}
}

// A second Close, made while the first still hands the streams' pages back,
// returns once the device is closed, as the first does: it returned nil at
// once, and its caller went on as if the device were closed.
func TestASecondClientCloseWaitsForTheFirst(t *testing.T) {
	d, err := cpu.New()
	require.NoError(t, err)
	st := &closeOrderStorage{Storage: d.Storage()}
	c, err := Open(context.Background(), WithBackend(&closeOrderDevice{Device: d, st: st}))
	require.NoError(t, err)
	_, err = c.Create(context.Background(), make([]byte, 4096))
	require.NoError(t, err)

	hold, entered := make(chan struct{}), make(chan struct{})
	st.mu.Lock()
	st.hold, st.entered = hold, entered
	st.mu.Unlock()
	first := make(chan error, 1)
	go func() { first <- c.Close() }()
	<-entered // the first Close is handing the buffer's page back
	second := make(chan error, 1)
	go func() { second <- c.Close() }()
	select {
	case err := <-second:
		second <- err
		st.mu.Lock()
		closed := st.closed
		st.mu.Unlock()
		if !closed {
			t.Error("the second Close returned before the device was closed")
		}
	case <-time.After(100 * time.Millisecond):
	}
	close(hold)
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	st.mu.Lock()
	defer st.mu.Unlock()
	require.True(t, st.closed)
	require.Empty(t, st.late)
}

// EndPersistent with no persistent window open is refused with
// ErrNoPersistentWindow and changes nothing: it did nothing and said
// nothing, so a caller's windows could drift from the stream's unseen. One
// on a closed stream is ErrClosed, and a nil stream's ErrNil. Persistent
// whose fn closed the window itself says so.
func TestEndPersistentWithNoWindowIsRefused(t *testing.T) {
	c := openClient(t)
	ctx := context.Background()
	s, err := c.NewStream()
	require.NoError(t, err)

	err = s.EndPersistent()
	require.ErrorIs(t, err, ErrNoPersistentWindow)
	require.ErrorContains(t, err, fmt.Sprintf("stream %d", s.ID()))

	require.NoError(t, s.BeginPersistent())
	require.NoError(t, s.BeginPersistent())
	require.NoError(t, s.EndPersistent())
	b, err := s.Empty(ctx, 64)
	require.NoError(t, err)
	require.NotZero(t, s.Report().Persistent.Usage.BytesInUse, "one window is still open")
	require.NoError(t, s.EndPersistent())
	require.ErrorIs(t, s.EndPersistent(), ErrNoPersistentWindow, "one too many")
	require.NoError(t, b.Free())

	err = c.Persistent(WithStream(ctx, s), func(ctx context.Context) error {
		return s.EndPersistent()
	})
	require.ErrorIs(t, err, ErrNoPersistentWindow, "fn closed Persistent's window")
	mine := errors.New("fn's own")
	err = c.Persistent(WithStream(ctx, s), func(ctx context.Context) error {
		_ = s.EndPersistent()
		return mine
	})
	require.ErrorIs(t, err, mine, "fn's error comes first")
	require.NoError(t, c.Persistent(WithStream(ctx, s), func(ctx context.Context) error { return nil }))

	require.NoError(t, s.BeginPersistent())
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.EndPersistent(), ErrClosed)
	require.ErrorIs(t, (*Stream)(nil).EndPersistent(), ErrNil)
}
