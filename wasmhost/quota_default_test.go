package wasmhost

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/memory"
)

// quotaDevice is a cpu device of the quota tests and what the bound of a
// guest with a quota of more than 512 KiB adds to twice the quota there.
type quotaDevice struct {
	name  string
	opts  []cpu.Option
	slack uint64
}

// quotaDevices: without sparse residency the default layout builds the
// SubSlices pools (slack: a 2 MiB and an 8 MiB page); with it, one
// virtual pool (slack: a 20 MiB chunk).
var quotaDevices = []quotaDevice{
	{"sliced pools", nil, 2<<20 + 8<<20},
	{"virtual pool", []cpu.Option{cpu.WithSparseGranule(64 << 10)}, memory.VirtualChunkUnit},
}

func (d quotaDevice) bound(quota uint64) uint64 { return 2*quota + d.slack }

func (d quotaDevice) client(t testing.TB) *client.Client {
	dev, err := cpu.New(d.opts...)
	require.NoError(t, err)
	return openClient(t, client.WithBackend(dev))
}

// loopBody is a _start body that runs pre, then body n times, $i
// counting from 0.
func loopBody(pre string, n int, body string) string {
	return fmt.Sprintf(`(local $i i32) %s
	(loop $l
	  %s
	  (local.set $i (i32.add (local.get $i) (i32.const 1)))
	  (br_if $l (i32.lt_u (local.get $i) (i32.const %d))))`, pre, body, n)
}

// Guests that keep within a quota of 1 MB of live bytes and would have
// the pools reserve far more.
var (
	// persistentSizes makes and frees 300 persistent buffers of 1,000,000
	// B, 999,744 B, …: the persistent pool keeps each freed allocation
	// for reuse by its size until a cleanup (275 MiB unchecked).
	persistentSizes     = loopBody(`(drop (call $pbegin))`, 300, persistentSizesLoop)
	persistentSizesLoop = `
	  (drop (call $create (i64.sub (i64.const 1000000) (i64.mul (i64.extend_i32_u (local.get $i)) (i64.const 256))) (i32.const 0)))
	  (drop (call $free (i32.load (i32.const 0))))`
	// oneByteBuffers makes 100,000 buffers of 1 B, 100,000 B against the
	// quota, each padded to the 256 B alignment (26 MB of pages).
	oneByteBuffers = loopBody("", 100_000, `(drop (call $create (i64.const 1) (i32.const 0)))`)
	// fragmenting fills the quota with buffers of S bytes, a 1 B buffer
	// after each, frees the large ones and goes again, S doubling from
	// 256 B to 512 KiB: the 1 B buffers left behind split the free space
	// so that the next size fits nowhere (68 MiB of sliced pages, 80 MiB of
	// a virtual pool, unchecked). Handles of the large buffers go from
	// address 2048.
	fragmenting = `(local $S i64) (local $live i64) (local $n i32) (local $k i32) (local $r i32)
	(local.set $S (i64.const 256))
	(loop $sizes
	  (local.set $r (i32.const 0))
	  (block $rdone (loop $rounds
	    (local.set $n (i32.const 0))
	    (block $fdone (loop $fill
	      (br_if $fdone (i64.gt_u (i64.add (i64.add (local.get $live) (local.get $S)) (i64.const 1)) (i64.const 1000000)))
	      (br_if $fdone (call $create (local.get $S) (i32.add (i32.const 2048) (i32.shl (local.get $n) (i32.const 2)))))
	      (local.set $n (i32.add (local.get $n) (i32.const 1)))
	      (local.set $live (i64.add (local.get $live) (local.get $S)))
	      (if (i32.eqz (call $create (i64.const 1) (i32.const 0)))
	        (then (local.set $live (i64.add (local.get $live) (i64.const 1)))))
	      (br $fill)))
	    (local.set $k (i32.const 0))
	    (block $frdone (loop $frees
	      (br_if $frdone (i32.ge_u (local.get $k) (local.get $n)))
	      (drop (call $free (i32.load (i32.add (i32.const 2048) (i32.shl (local.get $k) (i32.const 2))))))
	      (local.set $live (i64.sub (local.get $live) (local.get $S)))
	      (local.set $k (i32.add (local.get $k) (i32.const 1)))
	      (br $frees)))
	    (local.set $r (i32.add (local.get $r) (i32.const 1)))
	    (br_if $rdone (i64.gt_u (local.get $live) (i64.const 500000)))
	    (br_if $rounds (i32.lt_u (local.get $r) (i32.const 40)))))
	  (local.set $S (i64.shl (local.get $S) (i64.const 1)))
	  (br_if $sizes (i64.le_u (local.get $S) (i64.const 524288))))`
)

// TestDefaultLayoutQuota: a guest with a quota that installs no layout is
// held to the same bound on what its pools reserve as one that does,
// with and without sparse residency, however it allocates; and the device
// never holds more for it, not even while a buffer is made.
func TestDefaultLayoutQuota(t *testing.T) {
	guests := []struct {
		name, body string
		refused    bool // some buffer_create answers EDQUOT
	}{
		{"persistent allocations of many sizes", persistentSizes, false},
		{"1-byte buffers", oneByteBuffers, true},
		{"fragmenting", fragmenting, true},
	}
	for _, d := range quotaDevices {
		for _, g := range guests {
			t.Run(d.name+"/"+g.name, func(t *testing.T) {
				c := d.client(t)
				h := newHost(t, context.Background(), c)
				m := compile(t, h, guestWAT(t, "", g.body))
				res, err := h.Run(context.Background(), m, WithMaxDeviceBytes(quotaOf1MB))
				require.NoError(t, err)
				require.LessOrEqual(t, res.PeakReservedBytes, d.bound(quotaOf1MB))
				require.LessOrEqual(t, c.StorageStats().BytesPeak, d.bound(quotaOf1MB), "the device never held more for the guest")
				if g.refused {
					require.Contains(t, res.LastError, fmt.Sprintf("past the %d B a guest with a quota of 1000000 B may have them reserve", d.bound(quotaOf1MB)))
				} else {
					require.Zero(t, res.FailedCalls, res.LastError)
				}
				require.LessOrEqual(t, res.PeakBytes, uint64(quotaOf1MB))
				require.Zero(t, liveBuffers(c))
			})
		}
	}
}

// TestWithinQuotaOnEveryDevice: a guest within its quota runs unrefused
// under the default layout and under each preset it installs, with and
// without sparse residency (on a sparse device a 1 B buffer takes a
// virtual chunk of 20 MiB, past twice the quota and the ladder's pages),
// and reserves the same as without a quota.
func TestWithinQuotaOnEveryDevice(t *testing.T) {
	for _, d := range quotaDevices {
		for _, layout := range []string{"", "virtual", "sub-slices"} {
			t.Run(fmt.Sprintf("%s/%q", d.name, layout), func(t *testing.T) {
				c := d.client(t)
				h := newHost(t, context.Background(), c)
				extra, body := "", planWorkload
				if layout != "" {
					var install string
					extra, install, _ = installLayout(layout)
					body = `(if ` + install[len("(drop "):len(install)-1] + ` (then unreachable))` + body
				}
				m := compile(t, h, guestWAT(t, extra, body))
				free, err := h.Run(context.Background(), m)
				require.NoError(t, err)
				res, err := h.Run(context.Background(), m, WithMaxDeviceBytes(700_000))
				require.NoError(t, err, res.LastError)
				require.Zero(t, res.FailedCalls)
				require.Equal(t, free.PeakReservedBytes, res.PeakReservedBytes)
				require.Equal(t, free.PeakDeviceBytes, res.PeakDeviceBytes)
				require.LessOrEqual(t, res.PeakReservedBytes, d.bound(700_000))
				require.Zero(t, liveBuffers(c))
			})
		}
	}
}

// otherTenant gives c a stream, beside the guest's, whose pools keep the
// free page of an 8 MB buffer made and freed, and returns it and the
// page's bytes.
func otherTenant(t *testing.T, c *client.Client) (*client.Stream, uint64) {
	s, err := c.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	b, err := s.Empty(client.WithStream(context.Background(), s), 8_000_000)
	require.NoError(t, err)
	require.NoError(t, s.Free(b))
	kept := s.Usage().BytesReserved
	require.GreaterOrEqual(t, kept, uint64(8_000_000))
	return s, kept
}

// TestQuotaCleanupAndOtherStreams: a guest's cleanup returns its own
// pools' free pages only (Stream.MemoryCleanup), never another stream's,
// and a guest that neither freed a buffer nor was refused one since its
// last cleanup makes none. The guest's peak of device bytes is its own
// pages.
func TestQuotaCleanupAndOtherStreams(t *testing.T) {
	t.Run("refused once", func(t *testing.T) {
		c := cpuClient(t)
		other, kept := otherTenant(t, c)
		h := newHost(t, context.Background(), c)
		extra, install, _ := installLayout(fourPools(8 << 20))
		// The first buffer opens an 8 MiB page, the second another one,
		// past the bound.
		m := compile(t, h, guestWAT(t, extra, install+`(drop (call $create (i64.const 1) (i32.const 0)))
			(drop (call $create (i64.const 300) (i32.const 4)))`))
		res, err := h.Run(context.Background(), m, WithMaxDeviceBytes(quotaOf1MB))
		require.NoError(t, err)
		require.Equal(t, kept, other.Usage().BytesReserved, "the other stream keeps its free page")
		require.Equal(t, uint64(1), res.FailedCalls, res.LastError)
		require.Contains(t, res.LastError, "300 B more would make the guest's pools reserve")
	})
	t.Run("peak of device bytes", func(t *testing.T) {
		c := cpuClient(t)
		other, kept := otherTenant(t, c)
		h := newHost(t, context.Background(), c)
		extra, install, _ := installLayout("sub-slices")
		m := compile(t, h, guestWAT(t, extra, loopBody(install+`(drop (call $pbegin))`, 300, persistentSizesLoop)))
		res, err := h.Run(context.Background(), m, WithMaxDeviceBytes(quotaOf1MB))
		require.NoError(t, err)
		require.Zero(t, res.FailedCalls, res.LastError)
		require.Equal(t, kept, other.Usage().BytesReserved, "the guest's cleanups leave the other stream's free page")
		require.NotZero(t, res.PeakReservedBytes)
		require.Equal(t, res.PeakReservedBytes, res.PeakDeviceBytes)
	})
}
