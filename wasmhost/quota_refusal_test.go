package wasmhost

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQuotaRefusalReturnsItsPage: a buffer refused past the bound opened a
// page in the pools' account only; it goes at once, so the pools never
// reserve past the bound, as memory_usage shows the guest right after the
// refusal and the run's Usage at its end.
func TestQuotaRefusalReturnsItsPage(t *testing.T) {
	t.Run("installed layout", func(t *testing.T) {
		c := cpuClient(t)
		h := newHost(t, context.Background(), c)
		extra, install, _ := installLayout(fourPools(8 << 20))
		// The 300 B buffer would open a second 8 MiB page, past the bound;
		// the guest exits with the bytes reserved after the refusal, in MiB.
		m := compile(t, h, guestWAT(t, extra, install+`
			(if (call $create (i64.const 1) (i32.const 0)) (then unreachable))
			(if (i32.ne (call $create (i64.const 300) (i32.const 4)) (i32.const 19)) (then unreachable))
			(if (call $usage (i32.const 64)) (then unreachable))
			(call $exit (i32.wrap_i64 (i64.shr_u (i64.load (i32.const 88)) (i64.const 20))))`))
		res, err := h.Run(context.Background(), m, WithMaxDeviceBytes(quotaOf1MB))
		require.Equal(t, &ExitError{Code: 8}, err, "the pools reserve the first page only")
		require.Equal(t, uint64(8<<20), res.Usage.BytesReserved)
	})
	for _, d := range quotaDevices {
		t.Run(d.name+"/fragmenting", func(t *testing.T) {
			c := d.client(t)
			h := newHost(t, context.Background(), c)
			m := compile(t, h, guestWAT(t, "", fragmenting))
			res, err := h.Run(context.Background(), m, WithMaxDeviceBytes(quotaOf1MB))
			require.NoError(t, err)
			require.NotZero(t, res.FailedCalls)
			require.LessOrEqual(t, res.Usage.BytesReserved, d.bound(quotaOf1MB), "the pools at the end of the run")
		})
	}
}

// TestQuotaOnAStreamThatHoldsPages: a guest run on a stream (OnStream)
// whose pools keep free pages from an earlier guest has them cleaned
// before it is refused: its first buffer within its quota is made.
func TestQuotaOnAStreamThatHoldsPages(t *testing.T) {
	for _, d := range quotaDevices {
		t.Run(d.name, func(t *testing.T) {
			c := d.client(t)
			h := newHost(t, context.Background(), c)
			s, err := c.NewStream()
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			first := compile(t, h, guestWAT(t, "", fragmenting))
			_, err = h.Run(context.Background(), first, OnStream(s), WithMaxDeviceBytes(quotaOf1MB))
			require.NoError(t, err)
			require.Positive(t, s.Usage().BytesReserved, "the first guest left free pages")
			second := compile(t, h, guestWAT(t, "", `(call $exit (call $create (i64.const 1000000) (i32.const 0)))`))
			res, err := h.Run(context.Background(), second, OnStream(s), WithMaxDeviceBytes(quotaOf1MB))
			require.NoError(t, err, "exit status %v: %s", err, res.LastError)
			require.LessOrEqual(t, res.PeakReservedBytes, d.bound(quotaOf1MB))
		})
	}
}

// TestQuotaPeakAfterARefusal: a cleanup that returns a refused buffer's
// pages, which the device never held, and flushes what other work on the
// device released meanwhile (pages a device defers while work in flight
// uses them) takes the others' bytes off the baseline of PeakDeviceBytes,
// not the refused pages': the guest's later pages count in full.
func TestQuotaPeakAfterARefusal(t *testing.T) {
	c := cpuClient(t)
	// Other work holds 1 MiB when the guest starts and releases it while
	// the guest writes to stdout; the device flushes it at the next
	// cleanup.
	st := c.Device().Storage()
	other, err := st.Alloc(1 << 20)
	require.NoError(t, err)
	release := writerFunc(func(p []byte) (int, error) { st.Dealloc(other.ID); return len(p), nil })
	h := newHost(t, context.Background(), c)
	// Two buffers of 200 KB share a 512 KiB page; 300 KB go to an 11.5 MiB
	// page, which with the first page passes the bound (12,485,760 B) and
	// is refused. Two more 200 KB buffers then open a second 512 KiB page.
	layout := `{"Sliced":[{"page_size":524288,"pages":null,"max_slice":262144},{"page_size":12058624,"pages":null,"max_slice":null}]}`
	prelude := strings.Replace(watPrelude, `(memory (export "memory") 1)`,
		`(import "wasi_snapshot_preview1" "fd_write" (func $fdwrite (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)`, 1)
	extra, install, _ := installLayout(layout)
	m := compile(t, h, wat(t, prelude+extra+`
  (func (export "_start")
	`+install+`
	(if (call $create (i64.const 200000) (i32.const 0)) (then unreachable))
	(i32.store (i32.const 512) (i32.const 1024))
	(i32.store (i32.const 516) (i32.const 1))
	(if (call $fdwrite (i32.const 1) (i32.const 512) (i32.const 1) (i32.const 520)) (then unreachable))
	(if (i32.ne (call $create (i64.const 300000) (i32.const 0)) (i32.const 19)) (then unreachable))
	(if (call $create (i64.const 200000) (i32.const 0)) (then unreachable))
	(if (call $create (i64.const 200000) (i32.const 0)) (then unreachable))))`))
	res, err := h.Run(context.Background(), m, WithMaxDeviceBytes(quotaOf1MB), WithStdout(release))
	require.NoError(t, err, res.LastError)
	require.Equal(t, uint64(1<<20), res.PeakReservedBytes)
	require.Equal(t, uint64(1<<20), res.PeakDeviceBytes, "the guest's two pages")
}
