package memory_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/memory"
)

// ringSizes is a fixed spread of request sizes, most of them small, as
// model workloads ask.
func ringSizes(n int, maxSize uint64) []uint64 {
	sizes := make([]uint64, n)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range sizes {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		// Log-uniform from 1 B to maxSize.
		bits := 1 + x%uint64(64-leadingZeros(maxSize))
		sizes[i] = 1 + (x>>8)%(uint64(1)<<bits)
		sizes[i] = min(sizes[i], maxSize)
	}
	return sizes
}

func leadingZeros(v uint64) int {
	n := 0
	for v&(1<<63) == 0 && n < 64 {
		v <<= 1
		n++
	}
	return n
}

// BenchmarkReserveFree keeps a ring of 256 live reservations: each op frees
// the oldest and reserves the next size, per pool kind and preset.
func BenchmarkReserveFree(b *testing.B) {
	const ring = 256
	for _, c := range []struct {
		name       string
		layout     memory.Layout
		maxSize    uint64
		persistent bool
	}{
		{"Sliced", memory.SlicedLayout(memory.SlicedPool{PageSize: 64 << 20}), 1 << 20, false},
		{"Exclusive", memory.SlicedLayout(memory.SlicedPool{PageSize: 4096}), 1 << 20, false}, // replaced below
		{"Direct", memory.DirectLayout(), 1 << 20, false},
		{"Persistent", memory.SubSlicesLayout(), 1 << 20, true},
		{"SubSlices", memory.SubSlicesLayout(), 64 << 20, false},
		{"ExclusivePages", memory.ExclusivePagesLayout(), 64 << 20, false},
	} {
		if c.name == "Exclusive" {
			// The exclusive pool on its own: every size in one bucket.
			c.layout = memory.ExclusivePagesLayout()
			c.maxSize = 4096
		}
		b.Run(c.name, func(b *testing.B) {
			m, err := memory.NewManager(&nullStorage{}, h200, c.layout)
			require.NoError(b, err)
			if c.persistent {
				m.BeginPersistent()
			}
			sizes := ringSizes(4096, c.maxSize)
			live := make([]memory.Handle, ring)
			for i := range live {
				live[i] = mustReserveB(b, m, sizes[i])
			}
			i := 0
			for b.Loop() {
				slot := i % ring
				if err := m.Free(live[slot]); err != nil {
					b.Fatal(err)
				}
				live[slot] = mustReserveB(b, m, sizes[i%len(sizes)])
				i++
			}
		})
	}
	b.Run("Arena", func(b *testing.B) {
		const slotSize = 4096
		plan := memory.ArenaPlan{Pages: []uint64{ring * slotSize}, Slots: make([]memory.ArenaSlot, 1<<16)}
		for k := range plan.Slots {
			plan.Slots[k] = memory.ArenaSlot{Size: slotSize, Page: 0, Offset: uint64(k%ring) * slotSize}
		}
		layout := memory.ArenaLayout(plan)
		m, err := memory.NewManager(&nullStorage{}, h200, layout)
		require.NoError(b, err)
		live := make([]memory.Handle, ring)
		k := 0
		reserve := func() memory.Handle {
			h := mustReserveB(b, m, slotSize-8)
			k++
			return h
		}
		for i := range live {
			live[i] = reserve()
		}
		for b.Loop() {
			if k == len(plan.Slots) {
				// The plan is spent: drain and reinstall, as a new step would.
				for _, h := range live {
					require.NoError(b, m.Free(h))
				}
				require.NoError(b, m.Install(layout))
				k = 0
				for j := range live {
					live[j] = reserve()
				}
			}
			// Reservation k takes the bytes reservation k-ring held.
			slot := k % ring
			if err := m.Free(live[slot]); err != nil {
				b.Fatal(err)
			}
			live[slot] = reserve()
		}
		if m.Spills() != 0 {
			b.Fatalf("%d reservations missed the arena plan", m.Spills())
		}
	})
}

func mustReserveB(b *testing.B, m *memory.Manager, size uint64) memory.Handle {
	h, err := m.Reserve(size, memory.Eager)
	if err != nil {
		b.Fatal(err)
	}
	return h
}
