package wasmhost

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/memory"
)

// cpuClient is a client on the pure-Go device with its defaults: 256 B
// alignment, pages up to 4 GiB, a 16 GiB heap.
func cpuClient(t testing.TB) *client.Client {
	d, err := cpu.New()
	require.NoError(t, err)
	return openClient(t, client.WithBackend(d))
}

// quotaOf1MB is the device-byte quota of the layout cases, and
// quotaBound what it lets the pools of a layout the guest installed
// reserve on the cpu device: twice the quota plus a 2 MiB and an 8 MiB
// page (the quota passes the 2 MiB pool's slices of 512 KiB).
const (
	quotaOf1MB = 1_000_000
	quotaBound = 2*quotaOf1MB + 2<<20 + 8<<20
)

// installLayout installs the layout JSON at address 1024 and records the
// status; its log line is installLog.
func installLayout(layout string) (extra, body, log string) {
	return dataAt([]byte(layout)), fmt.Sprintf(`(drop (call $install (i32.const 1024) (i32.const %d)))`, len(layout)),
		fmt.Sprintf("==> vkrt_v1.memory_install(layout=1024,layout_len=%d)\n", len(layout))
}

// fourSizes makes buffers of 1, 300, 600 and 900 B, 1801 B in all: well
// inside a quota of 1 MB. Each of the sliced layouts below routes each size
// to a pool of its own.
const fourSizes = `(drop (call $create (i64.const 1) (i32.const 0)))
	(drop (call $create (i64.const 300) (i32.const 4)))
	(drop (call $create (i64.const 600) (i32.const 8)))
	(drop (call $create (i64.const 900) (i32.const 12)))`

func fourSizesLog(statuses ...int) string {
	var s string
	for i, size := range []int{1, 300, 600, 900} {
		s += fmt.Sprintf("\n==> vkrt_v1.buffer_create(size=%d,out_handle=%d)\n<== status=%d", size, 4*i, statuses[i])
	}
	return s
}

// fourPools is a Sliced layout of four uncapped pools of page-byte pages,
// serving slices up to 256, 512, 768 and 1024 B.
func fourPools(page uint64) string {
	return fmt.Sprintf(`{"Sliced":[{"page_size":%[1]d,"pages":null,"max_slice":256},{"page_size":%[1]d,"pages":null,"max_slice":512},`+
		`{"page_size":%[1]d,"pages":null,"max_slice":768},{"page_size":%[1]d,"pages":null,"max_slice":1024}]}`, page)
}

// TestInstalledLayoutQuota: a guest with a quota of device bytes cannot
// install its way past it. Each case runs a guest on the cpu device and
// checks its host calls, their statuses, and the most the device held for
// it.
func TestInstalledLayoutQuota(t *testing.T) {
	type quotaCase struct {
		name      string
		layout    string // installed first when set
		body      string
		quota     uint64
		log       string
		lastError string
		// deviceBytes is the most device memory the device held for the
		// guest, after each call and at any moment: its pools' pages.
		deviceBytes uint64
	}
	cases := []quotaCase{
		// Four 1 GiB pages for 1801 B: each buffer is refused before any
		// page is made.
		{name: "pages of a GiB", layout: fourPools(1 << 30), body: fourSizes, quota: quotaOf1MB,
			log: "<== status=0" + fourSizesLog(19, 19, 19, 19), deviceBytes: 0,
			lastError: fmt.Sprintf("900 B go to pool 3 of the layout the guest installed, whose pages of 1073741824 B are past the %d B a guest with a quota of 1000000 B may have its pools reserve (twice the quota plus 10485760 B of default pages)", quotaBound)},
		// Pages inside the bound, but one for each buffer: the first fits,
		// the others would take the pools past it and are freed again
		// before the device holds their pages, even for a moment.
		{name: "a page for each buffer", layout: fourPools(8 << 20), body: fourSizes, quota: quotaOf1MB,
			log: "<== status=0" + fourSizesLog(0, 19, 19, 19), deviceBytes: 8 << 20,
			lastError: fmt.Sprintf("900 B more would make the guest's pools reserve 16777216 B, past the %d B", quotaBound)},
		{name: "a page for each buffer, without a quota", layout: fourPools(8 << 20), body: fourSizes,
			log: "<== status=0" + fourSizesLog(0, 0, 0, 0), deviceBytes: 32 << 20},
		// Arena pages are made as their slots are reserved: a plan of two
		// 1 GiB pages, 1 B in each, is refused whole, and the guest stays
		// on the default pools.
		{name: "an arena of GiB pages", layout: `{"Arena":{"pages":[1073741824,1073741824],"slots":[[1,0,0],[1,1,0]],"fallback":null}}`,
			body: `(drop (call $create (i64.const 1) (i32.const 0))) (drop (call $create (i64.const 1) (i32.const 4)))`, quota: quotaOf1MB,
			log:         "<== status=19\n==> vkrt_v1.buffer_create(size=1,out_handle=0)\n<== status=0\n==> vkrt_v1.buffer_create(size=1,out_handle=4)\n<== status=0",
			deviceBytes: 2 << 20, lastError: fmt.Sprintf("memory_install: the arena's pages take 2147483648 B, past the %d B", quotaBound)},
		{name: "an arena within the bound", layout: `{"Arena":{"pages":[1048576],"slots":[[1000,0,0],[300000,0,1024]],"fallback":null}}`,
			body: `(drop (call $create (i64.const 1000) (i32.const 0))) (drop (call $create (i64.const 300000) (i32.const 4)))`, quota: quotaOf1MB,
			log:         "<== status=0\n==> vkrt_v1.buffer_create(size=1000,out_handle=0)\n<== status=0\n==> vkrt_v1.buffer_create(size=300000,out_handle=4)\n<== status=0",
			deviceBytes: 1 << 20},
		// Guests within their quota: under the default pools, and under
		// them installed again, a buffer of each pool's sizes.
		{name: "the default pools", body: `(drop (call $create (i64.const 1) (i32.const 0))) (drop (call $create (i64.const 600000) (i32.const 4)))
			(drop (call $create (i64.const 399000) (i32.const 8)))`, quota: quotaOf1MB,
			log: `==> vkrt_v1.buffer_create(size=1,out_handle=0)
<== status=0
==> vkrt_v1.buffer_create(size=600000,out_handle=4)
<== status=0
==> vkrt_v1.buffer_create(size=399000,out_handle=8)
<== status=0`, deviceBytes: 10 << 20},
		{name: "the default pools installed", layout: "sub-slices", body: `(drop (call $create (i64.const 1) (i32.const 0))) (drop (call $create (i64.const 600000) (i32.const 4)))
			(drop (call $create (i64.const 399000) (i32.const 8)))`, quota: quotaOf1MB,
			log: `<== status=0
==> vkrt_v1.buffer_create(size=1,out_handle=0)
<== status=0
==> vkrt_v1.buffer_create(size=600000,out_handle=4)
<== status=0
==> vkrt_v1.buffer_create(size=399000,out_handle=8)
<== status=0`, deviceBytes: 10 << 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cpuClient(t)
			extra, body, log := "", tc.body, tc.log
			if tc.layout != "" {
				var install, installLog string
				extra, install, installLog = installLayout(tc.layout)
				body, log = install+body, installLog+log
			}
			h, calls := newLoggedHost(t, c)
			m := compile(t, h, guestWAT(t, extra, body))
			opts := []RunOption{}
			if tc.quota != 0 {
				opts = append(opts, WithMaxDeviceBytes(tc.quota))
			}
			res, err := h.Run(context.Background(), m, opts...)
			require.NoError(t, err)
			require.Equal(t, log, hostCalls(calls.String()))
			require.Contains(t, res.LastError, tc.lastError)
			require.Equal(t, tc.deviceBytes, res.PeakDeviceBytes)
			require.Equal(t, tc.deviceBytes, res.PeakReservedBytes)
			c.MemoryCleanup(context.Background())
			after := c.StorageStats()
			require.Equal(t, tc.deviceBytes, after.BytesPeak, "the device never held more for the guest")
			require.Zero(t, after.Bytes)
			require.Zero(t, liveBuffers(c))
		})
	}
}

// planWorkload makes and frees buffers of 4 KiB to 600 KB, at most 669,632
// B at once; any failed call traps.
const planWorkload = `
	(if (call $create (i64.const 4096) (i32.const 0)) (then unreachable))
	(if (call $create (i64.const 65536) (i32.const 4)) (then unreachable))
	(if (call $create (i64.const 300000) (i32.const 8)) (then unreachable))
	(if (call $free (i32.load (i32.const 8))) (then unreachable))
	(if (call $create (i64.const 600000) (i32.const 8)) (then unreachable))
	(if (call $free (i32.load (i32.const 0))) (then unreachable))
	(if (call $create (i64.const 1000) (i32.const 0)) (then unreachable))
	(if (call $free (i32.load (i32.const 0))) (then unreachable))
	(if (call $free (i32.load (i32.const 4))) (then unreachable))
	(if (call $free (i32.load (i32.const 8))) (then unreachable))`

// TestPlansWithinQuota: a guest within its quota installs the plans
// `vkrt plan` would make for it (measured by a dry run of the same
// buffers), basic and strong, and runs under each as it did under the
// default pools.
func TestPlansWithinQuota(t *testing.T) {
	for _, strength := range []plan.Strength{plan.Basic, plan.Strong} {
		t.Run(strength.String(), func(t *testing.T) {
			c := cpuClient(t)
			h := newHost(t, context.Background(), c)
			plain := compile(t, h, guestWAT(t, "", planWorkload))
			ctx := context.Background()
			meas, err := c.MeasurePlan(ctx, func(ctx context.Context) error {
				_, err := h.Run(ctx, plain, OnStream(c.Stream(ctx)), WithMaxDeviceBytes(700_000))
				return err
			}, client.MeasureOptions{Verify: true, Plan: plan.Options{Strength: strength}})
			require.NoError(t, err)
			layout := meas.Plan.String()
			if strength == plan.Basic {
				pools, ok := meas.Plan.Sliced()
				require.True(t, ok, layout)
				for i, p := range pools {
					// Past them the manager ends a plan in an exclusive
					// pool, whose allocations are each a buffer's own size.
					require.True(t, p.Pages != nil && p.Grow, "pool %d of a basic plan is a capped forecast: %s", i, layout)
				}
			} else {
				_, ok := meas.Plan.Arena()
				require.True(t, ok, layout)
			}
			extra, install, _ := installLayout(layout)
			m := compile(t, h, guestWAT(t, extra, `(if `+install[len("(drop "):len(install)-1]+` (then unreachable))`+planWorkload))
			res, err := h.Run(ctx, m, WithMaxDeviceBytes(700_000))
			require.NoError(t, err, "the guest ran under its plan: %s", res.LastError)
			require.Zero(t, res.FailedCalls)
			require.Zero(t, res.Spills)
			require.LessOrEqual(t, res.PeakReservedBytes, meas.DryRun.Usage().BytesReserved, "the plan reserves no more than the default pools")
			require.Zero(t, liveBuffers(c))
		})
	}
}

// The ladder ladderSlack reads (memory.SubSlicesPages) is the pools a
// stream gets: on the cpu device (no sparse residency, so the default
// layout builds the SubSlices pools) the stream's sliced pools are its
// pages and slices, in order.
func TestLadderIsTheDefaultPools(t *testing.T) {
	c := cpuClient(t)
	want := memory.SubSlicesPages(c.Properties())
	var got []memory.SlicedKind
	for _, pool := range c.MemoryReport(context.Background()).Dynamic {
		k, ok := pool.Kind.(memory.SlicedKind)
		if !ok {
			continue // what passes the ladder's slices goes to pages of its own
		}
		got = append(got, memory.SlicedKind{PageSize: k.PageSize, MaxSliceSize: k.MaxSliceSize})
	}
	require.Equal(t, want, got)
}
