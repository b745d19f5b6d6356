package wasmhost

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	json "github.com/goccy/go-json"
	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/wasmhost/guest"
)

// watData is b as the string of a WAT data segment.
func watData(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		fmt.Fprintf(&s, "\\%02x", c)
	}
	return s.String()
}

// The handles a guest's first buffers get: slot i+1, generation 1.
const (
	firstHandle  = 1<<indexBits | 1
	secondHandle = 1<<indexBits | 2
)

// descriptor is the descriptor of launches; handles name guest buffers.
func descriptor(t testing.TB, launches ...guest.Launch) []byte {
	d, err := guest.AppendDescriptor(nil, launches...)
	require.NoError(t, err)
	return d
}

// fill16 fills the guest's first buffer (16 B) with four words.
func fill16(t testing.TB) []byte {
	return descriptor(t, guest.Fill(4, 7, guest.BufferOf(firstHandle, 16)))
}

// patched is d with the bytes at offset replaced.
func patched(d []byte, offset int, b ...byte) []byte {
	d = append([]byte(nil), d...)
	copy(d[offset:], b)
	return d
}

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func u16(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }

// dataAt puts b at address 1024 of the guest's memory.
func dataAt(b []byte) string { return fmt.Sprintf(`(data (i32.const 1024) "%s")`, watData(b)) }

// abiCase is one guest and the host calls it must make, with their
// statuses, as wazero's logging listener writes them.
type abiCase struct {
	name  string
	extra string // definitions after the prelude
	body  string // _start's body
	opts  []RunOption
	log   string
	// lastError, when set, is a part of the message last_error gives.
	lastError string
}

const freeSevenMessage = "buffer_free: handle 0x7 names no live buffer of this guest"

const create16 = `(drop (call $create (i64.const 16) (i32.const 0)))`
const create16Log = `==> vkrt_v1.buffer_create(size=16,out_handle=0)
<== status=0`

// abiCases are the cases. In their logs and messages %[1]d stands for the
// length of an empty stream's report JSON.
func abiCases(t testing.TB) []abiCase {
	fill := fill16(t)
	return []abiCase{
		// Guest memory ranges: EFAULT before anything happens.
		{name: "create's out_handle past the end of memory", body: `(drop (call $create (i64.const 16) (i32.const 65534)))`,
			log: "==> vkrt_v1.buffer_create(size=16,out_handle=65534)\n<== status=21", lastError: "outside the guest's 65536 B"},
		{name: "create's out_handle wrapping past 2^32", body: `(drop (call $create (i64.const 16) (i32.const -2)))`,
			log: "==> vkrt_v1.buffer_create(size=16,out_handle=-2)\n<== status=21"},
		{name: "write from a range past the end of memory", body: create16 + `(drop (call $write (call $h0) (i64.const 0) (i32.const 65530) (i32.const 16)))`,
			log: create16Log + "\n==> vkrt_v1.buffer_write(handle=1048577,offset=0,src=65530,len=16)\n<== status=21"},
		{name: "write from a range wrapping past 2^32", body: create16 + `(drop (call $write (call $h0) (i64.const 0) (i32.const -16) (i32.const 32)))`,
			log: create16Log + "\n==> vkrt_v1.buffer_write(handle=1048577,offset=0,src=-16,len=32)\n<== status=21"},
		{name: "write of a huge length", body: create16 + `(drop (call $write (call $h0) (i64.const 0) (i32.const 0) (i32.const -1)))`,
			log: create16Log + "\n==> vkrt_v1.buffer_write(handle=1048577,offset=0,src=0,len=-1)\n<== status=21"},
		{name: "read into a range past the end of memory", body: create16 + `(drop (call $read (call $h0) (i64.const 0) (i32.const 65536) (i32.const 1)))`,
			log: create16Log + "\n==> vkrt_v1.buffer_read(handle=1048577,offset=0,dst=65536,len=1)\n<== status=21"},
		{name: "EFAULT comes before the handle is looked at", body: `(drop (call $write (i32.const 0) (i64.const 0) (i32.const 65535) (i32.const 2)))`,
			log: "==> vkrt_v1.buffer_write(handle=0,offset=0,src=65535,len=2)\n<== status=21"},
		{name: "memory_usage's out past the end", body: `(drop (call $usage (i32.const 65512)))`,
			log: "==> vkrt_v1.memory_usage(out=65512)\n<== status=21"},
		{name: "is_dry_run's out past the end", body: `(drop (call $dry (i32.const 65533)))`,
			log: "==> vkrt_v1.is_dry_run(out=65533)\n<== status=21"},
		{name: "launch descriptor past the end", body: `(drop (call $launch (i32.const 65000) (i32.const 1000)))`,
			log: "==> vkrt_v1.launch(desc=65000,desc_len=1000)\n<== status=21"},
		{name: "memory_record label past the end", body: `(drop (call $record (i32.const 65535) (i32.const 2)))`,
			log: "==> vkrt_v1.memory_record(label=65535,label_len=2)\n<== status=21"},

		// Offsets and lengths inside the buffer: ERANGE.
		{name: "write past the end of the buffer", body: create16 + `(drop (call $write (call $h0) (i64.const 8) (i32.const 0) (i32.const 9)))`,
			log: create16Log + "\n==> vkrt_v1.buffer_write(handle=1048577,offset=8,src=0,len=9)\n<== status=68", lastError: "9 B at offset 8 is outside its 16 B"},
		{name: "write at offset 2^64-1", body: create16 + `(drop (call $write (call $h0) (i64.const -1) (i32.const 0) (i32.const 1)))`,
			log: create16Log + "\n==> vkrt_v1.buffer_write(handle=1048577,offset=-1,src=0,len=1)\n<== status=68"},
		{name: "write whose offset plus length overflows", body: create16 + `(drop (call $write (call $h0) (i64.const -8) (i32.const 0) (i32.const 16)))`,
			log: create16Log + "\n==> vkrt_v1.buffer_write(handle=1048577,offset=-8,src=0,len=16)\n<== status=68"},
		{name: "read past the end of the buffer", body: create16 + `(drop (call $read (call $h0) (i64.const 17) (i32.const 0) (i32.const 0)))`,
			log: create16Log + "\n==> vkrt_v1.buffer_read(handle=1048577,offset=17,dst=0,len=0)\n<== status=68"},
		{name: "empty write at the end of the buffer", body: create16 + `(drop (call $write (call $h0) (i64.const 16) (i32.const 0) (i32.const 0)))`,
			log: create16Log + "\n==> vkrt_v1.buffer_write(handle=1048577,offset=16,src=0,len=0)\n<== status=0"},

		{name: "a zero-size buffer", body: `(drop (call $create (i64.const 0) (i32.const 0)))
			(drop (call $write (call $h0) (i64.const 0) (i32.const 0) (i32.const 0)))
			(drop (call $read (call $h0) (i64.const 0) (i32.const 0) (i32.const 1)))`,
			log: `==> vkrt_v1.buffer_create(size=0,out_handle=0)
<== status=0
==> vkrt_v1.buffer_write(handle=1048577,offset=0,src=0,len=0)
<== status=0
==> vkrt_v1.buffer_read(handle=1048577,offset=0,dst=0,len=1)
<== status=68`},

		// Handles: EBADF.
		{name: "handle zero", body: `(drop (call $write (i32.const 0) (i64.const 0) (i32.const 0) (i32.const 4)))`,
			log: "==> vkrt_v1.buffer_write(handle=0,offset=0,src=0,len=4)\n<== status=8", lastError: "handle 0x0 names no live buffer"},
		{name: "forged handle", body: create16 + `(drop (call $free (i32.const 0x12345678)))`,
			log: create16Log + "\n==> vkrt_v1.buffer_free(handle=305419896)\n<== status=8"},
		{name: "right slot, generation zero", body: create16 + `(drop (call $free (i32.const 1)))`,
			log: create16Log + "\n==> vkrt_v1.buffer_free(handle=1)\n<== status=8"},
		{name: "all ones", body: `(drop (call $read (i32.const -1) (i64.const 0) (i32.const 0) (i32.const 4)))`,
			log: "==> vkrt_v1.buffer_read(handle=-1,offset=0,dst=0,len=4)\n<== status=8"},
		{name: "double free", body: create16 + `(drop (call $free (call $h0))) (drop (call $free (call $h0)))`,
			log: create16Log + "\n==> vkrt_v1.buffer_free(handle=1048577)\n<== status=0\n==> vkrt_v1.buffer_free(handle=1048577)\n<== status=8"},
		{name: "stale handle after its slot was reused", body: create16 + `(drop (call $free (call $h0)))
			(drop (call $create (i64.const 16) (i32.const 4)))
			(drop (call $write (call $h0) (i64.const 0) (i32.const 0) (i32.const 4)))
			(drop (call $write (call $h1) (i64.const 0) (i32.const 0) (i32.const 4)))`,
			log: create16Log + `
==> vkrt_v1.buffer_free(handle=1048577)
<== status=0
==> vkrt_v1.buffer_create(size=16,out_handle=4)
<== status=0
==> vkrt_v1.buffer_write(handle=1048577,offset=0,src=0,len=4)
<== status=8
==> vkrt_v1.buffer_write(handle=2097153,offset=0,src=0,len=4)
<== status=0`},
		{name: "launch binding a freed buffer", extra: dataAt(fill), body: create16 + `(drop (call $free (call $h0)))
			(drop (call $launch (i32.const 1024) (i32.const ` + fmt.Sprint(len(fill)) + `)))`,
			log: create16Log + "\n==> vkrt_v1.buffer_free(handle=1048577)\n<== status=0\n==> vkrt_v1.launch(desc=1024,desc_len=" + fmt.Sprint(len(fill)) + ")\n<== status=8"},

		// Quotas: EDQUOT.
		{name: "handle quota", opts: []RunOption{WithMaxHandles(2)}, body: `(drop (call $create (i64.const 1) (i32.const 0)))
			(drop (call $create (i64.const 1) (i32.const 4)))
			(drop (call $create (i64.const 1) (i32.const 8)))
			(drop (call $free (call $h0)))
			(drop (call $create (i64.const 1) (i32.const 8)))`,
			log: `==> vkrt_v1.buffer_create(size=1,out_handle=0)
<== status=0
==> vkrt_v1.buffer_create(size=1,out_handle=4)
<== status=0
==> vkrt_v1.buffer_create(size=1,out_handle=8)
<== status=19
==> vkrt_v1.buffer_free(handle=1048577)
<== status=0
==> vkrt_v1.buffer_create(size=1,out_handle=8)
<== status=0`, lastError: ""},
		{name: "device-byte quota", opts: []RunOption{WithMaxDeviceBytes(1000)}, body: `(drop (call $create (i64.const 600) (i32.const 0)))
			(drop (call $create (i64.const 401) (i32.const 4)))
			(drop (call $create (i64.const 400) (i32.const 4)))
			(drop (call $create (i64.const -1) (i32.const 8)))`,
			log: `==> vkrt_v1.buffer_create(size=600,out_handle=0)
<== status=0
==> vkrt_v1.buffer_create(size=401,out_handle=4)
<== status=19
==> vkrt_v1.buffer_create(size=400,out_handle=4)
<== status=0
==> vkrt_v1.buffer_create(size=-1,out_handle=8)
<== status=19`, lastError: "quota of 1000 B"},
		{name: "a size no pool takes", body: `(drop (call $create (i64.const 0x4000000000000000) (i32.const 0)))`,
			log: "==> vkrt_v1.buffer_create(size=4611686018427387904,out_handle=0)\n<== status=1"},
		{name: "a size of 2^64-1", body: `(drop (call $create (i64.const -1) (i32.const 0)))`,
			log: "==> vkrt_v1.buffer_create(size=-1,out_handle=0)\n<== status=1"},

		// Launch descriptors: EINVAL for anything malformed.
		{name: "launch: a valid fill", extra: dataAt(fill), body: create16 + `(drop (call $launch (i32.const 1024) (i32.const 44)))`,
			log: create16Log + "\n==> vkrt_v1.launch(desc=1024,desc_len=44)\n<== status=0"},
		{name: "launch: empty descriptor", body: `(drop (call $launch (i32.const 1024) (i32.const 0)))`,
			log: "==> vkrt_v1.launch(desc=1024,desc_len=0)\n<== status=28", lastError: "the header alone is 8 B"},
		{name: "launch: version 2", extra: dataAt(patched(fill, 0, 2)), body: create16 + `(drop (call $launch (i32.const 1024) (i32.const 44)))`,
			log: create16Log + "\n==> vkrt_v1.launch(desc=1024,desc_len=44)\n<== status=28"},
		{name: "launch: zero launches", extra: dataAt(u32(1)), body: `(drop (call $launch (i32.const 1024) (i32.const 8)))`,
			log: "==> vkrt_v1.launch(desc=1024,desc_len=8)\n<== status=28"},
		{name: "launch: 2^32-1 launches announced", extra: dataAt(patched(fill, 4, u32(0xFFFFFFFF)...)), body: create16 + `(drop (call $launch (i32.const 1024) (i32.const 44)))`,
			log: create16Log + "\n==> vkrt_v1.launch(desc=1024,desc_len=44)\n<== status=28"},
		{name: "launch: two launches announced, one given", extra: dataAt(patched(fill, 4, 2)), body: create16 + `(drop (call $launch (i32.const 1024) (i32.const 44)))`,
			log: create16Log + "\n==> vkrt_v1.launch(desc=1024,desc_len=44)\n<== status=28"},
		{name: "launch: truncated", extra: dataAt(fill), body: create16 + `(drop (call $launch (i32.const 1024) (i32.const 43)))`,
			log: create16Log + "\n==> vkrt_v1.launch(desc=1024,desc_len=43)\n<== status=28"},
		{name: "launch: a byte after the last launch", extra: dataAt(append(append([]byte(nil), fill...), 0)), body: create16 + `(drop (call $launch (i32.const 1024) (i32.const 45)))`,
			log: create16Log + "\n==> vkrt_v1.launch(desc=1024,desc_len=45)\n<== status=28"},
		{name: "launch: a malformed descriptor is EINVAL even with a bad handle in it", extra: dataAt(append(descriptor(t, guest.Fill(4, 7, guest.BufferOf(7, 16))), 0)),
			body: `(drop (call $launch (i32.const 1024) (i32.const 45)))`, log: "==> vkrt_v1.launch(desc=1024,desc_len=45)\n<== status=28"},
		{name: "launch: unknown kernel", extra: dataAt(patched(fill, 28, 'z')), body: create16 + `(drop (call $launch (i32.const 1024) (i32.const 44)))`,
			log: create16Log + "\n==> vkrt_v1.launch(desc=1024,desc_len=44)\n<== status=28", lastError: `no kernel "zill"`},
		{name: "launch: kernel name of 65535 B", extra: dataAt(patched(fill, 8, u16(0xFFFF)...)), body: create16 + `(drop (call $launch (i32.const 1024) (i32.const 44)))`,
			log: create16Log + "\n==> vkrt_v1.launch(desc=1024,desc_len=44)\n<== status=28"},
		{name: "launch: push constants not whole words", extra: dataAt(patched(fill, 10, 7)), body: create16 + `(drop (call $launch (i32.const 1024) (i32.const 44)))`,
			log: create16Log + "\n==> vkrt_v1.launch(desc=1024,desc_len=44)\n<== status=28"},
		{name: "launch: flags set", extra: dataAt(patched(fill, 14, 1)), body: create16 + `(drop (call $launch (i32.const 1024) (i32.const 44)))`,
			log: create16Log + "\n==> vkrt_v1.launch(desc=1024,desc_len=44)\n<== status=28"},
		{name: "launch: push constants call for more than the buffer holds", extra: dataAt(descriptor(t, guest.Fill(5, 7, guest.BufferOf(firstHandle, 16)))),
			body: create16 + `(drop (call $launch (i32.const 1024) (i32.const 44)))`,
			log:  create16Log + "\n==> vkrt_v1.launch(desc=1024,desc_len=44)\n<== status=28", lastError: "call for 20 B"},
		{name: "launch: a binding short", extra: dataAt(descriptor(t, guest.Launch{Kernel: "add", Grid: [3]uint32{1, 1, 1}, Push: u32(4), Buffers: []*guest.Buffer{guest.BufferOf(firstHandle, 16)}})),
			body: create16 + `(drop (call $launch (i32.const 1024) (i32.const 39)))`,
			log:  create16Log + "\n==> vkrt_v1.launch(desc=1024,desc_len=39)\n<== status=28", lastError: "1 bindings given, the kernel has 3"},
		{name: "launch: a grid past the device's limit", extra: dataAt(patched(fill, 16, u32(0x80000000)...)), body: create16 + `(drop (call $launch (i32.const 1024) (i32.const 44)))`,
			log: create16Log + "\n==> vkrt_v1.launch(desc=1024,desc_len=44)\n<== status=28"},
		{name: "launch: a grid of work groups with nothing to do", extra: dataAt(patched(patched(fill, 16, u32(65535)...), 20, u32(1024)...)),
			body: create16 + `(drop (call $launch (i32.const 1024) (i32.const 44)))`,
			log:  create16Log + "\n==> vkrt_v1.launch(desc=1024,desc_len=44)\n<== status=28", lastError: "runs 67107840 work groups, and at most 1 of them find work"},
		{name: "launch: reduce_sum of no element past one work group", extra: dataAt(descriptor(t, guest.Launch{Kernel: "reduce_sum", Grid: [3]uint32{4, 1, 1}, Push: u32(0),
			Buffers: []*guest.Buffer{guest.BufferOf(firstHandle, 16), guest.BufferOf(secondHandle, 16)}})),
			body: create16 + `(drop (call $create (i64.const 16) (i32.const 4)))
			(drop (call $launch (i32.const 1024) (i32.const 50)))`,
			log:       create16Log + "\n==> vkrt_v1.buffer_create(size=16,out_handle=4)\n<== status=0\n==> vkrt_v1.launch(desc=1024,desc_len=50)\n<== status=28",
			lastError: "runs 4 work groups, and at most 1 of them find work"},
		{name: "launch: an empty one on a large grid", extra: dataAt(patched(patched(patched(fill, 32, u32(0)...), 16, u32(65535)...), 20, u32(65535)...)),
			body: create16 + `(drop (call $launch (i32.const 1024) (i32.const 44)))`,
			log:  create16Log + "\n==> vkrt_v1.launch(desc=1024,desc_len=44)\n<== status=0"},

		// Layouts: EINVAL, EBUSY.
		{name: "install malformed layout JSON", extra: `(data (i32.const 1024) "{\"Sliced\":[{\"page_size\":")`, body: `(drop (call $install (i32.const 1024) (i32.const 24)))`,
			log: "==> vkrt_v1.memory_install(layout=1024,layout_len=24)\n<== status=28"},
		{name: "install a layout with a zero page", extra: `(data (i32.const 1024) "{\"Sliced\":[{\"page_size\":0}]}")`, body: `(drop (call $install (i32.const 1024) (i32.const 27)))`,
			log: "==> vkrt_v1.memory_install(layout=1024,layout_len=27)\n<== status=28"},
		{name: "install a page count past 65535", extra: `(data (i32.const 1024) "{\"Sliced\":[{\"page_size\":4096,\"pages\":99999999999999999999999}]}")`,
			body: `(drop (call $install (i32.const 1024) (i32.const 61)))`,
			log:  "==> vkrt_v1.memory_install(layout=1024,layout_len=61)\n<== status=28"},
		{name: "install pages of a TiB", extra: `(data (i32.const 1024) "{\"Sliced\":[{\"page_size\":1099511627776,\"pages\":65535}]}")`, body: `(drop (call $install (i32.const 1024) (i32.const 54)))`,
			log: "==> vkrt_v1.memory_install(layout=1024,layout_len=54)\n<== status=28", lastError: "cannot be honoured"},
		// Past the device memory: never asked of the device, its slots go
		// to the fallback pools (it was refused as past the largest
		// allocation, checked first).
		{name: "install an arena page of a TiB", extra: `(data (i32.const 1024) "{\"Arena\":{\"pages\":[1099511627776],\"slots\":[],\"fallback\":[]}}")`, body: `(drop (call $install (i32.const 1024) (i32.const 60)))`,
			log: "==> vkrt_v1.memory_install(layout=1024,layout_len=60)\n<== status=0"},
		{name: "install 64 KiB of layout JSON", body: `(drop (call $install (i32.const 0) (i32.const 65536)))`,
			log: "==> vkrt_v1.memory_install(layout=0,layout_len=65536)\n<== status=28"},
		{name: "install while a buffer is live, then after it is freed", extra: `(data (i32.const 1024) "direct")`,
			body: create16 + `(drop (call $install (i32.const 1024) (i32.const 6))) (drop (call $free (call $h0))) (drop (call $install (i32.const 1024) (i32.const 6)))`,
			log:  create16Log + "\n==> vkrt_v1.memory_install(layout=1024,layout_len=6)\n<== status=10\n==> vkrt_v1.buffer_free(handle=1048577)\n<== status=0\n==> vkrt_v1.memory_install(layout=1024,layout_len=6)\n<== status=0"},

		// Outputs too small: ERANGE with the needed length written.
		{name: "last_error into a small buffer, then one of the length it asked for", body: `(drop (call $free (i32.const 7)))
			(drop (call $lasterr (i32.const 100) (i32.const 4) (i32.const 8)))
			(drop (call $lasterr (i32.const 100) (i32.load (i32.const 8)) (i32.const 8)))`,
			log: "==> vkrt_v1.buffer_free(handle=7)\n<== status=8\n==> vkrt_v1.last_error(buf=100,buf_len=4,out_len=8)\n<== status=68\n" +
				fmt.Sprintf("==> vkrt_v1.last_error(buf=100,buf_len=%d,out_len=8)\n<== status=0", len(freeSevenMessage)), lastError: freeSevenMessage},
		{name: "memory_report into a small buffer, then one of the length it asked for", body: `(drop (call $report (i32.const 100) (i32.const 10) (i32.const 8)))
			(drop (call $report (i32.const 100) (i32.load (i32.const 8)) (i32.const 8)))`,
			log:       "==> vkrt_v1.memory_report(buf=100,buf_len=10,out_len=8)\n<== status=68\n==> vkrt_v1.memory_report(buf=100,buf_len=%[1]d,out_len=8)\n<== status=0",
			lastError: "memory_report: %[1]d B needed, the buffer holds 10 B"},
		{name: "last_error's out_len past the end", body: `(drop (call $lasterr (i32.const 0) (i32.const 0) (i32.const 65535)))`,
			log: "==> vkrt_v1.last_error(buf=0,buf_len=0,out_len=65535)\n<== status=21"},

		// Other arguments: EINVAL.
		{name: "persistent_end with no window open", body: `(drop (call $pend))`, log: "==> vkrt_v1.persistent_end()\n<== status=28"},
		{name: "record an empty label", body: `(drop (call $record (i32.const 0) (i32.const 0)))`,
			log: "==> vkrt_v1.memory_record(label=0,label_len=0)\n<== status=28"},
		{name: "record a label that is not UTF-8", extra: `(data (i32.const 1024) "\ff\fe")`, body: `(drop (call $record (i32.const 1024) (i32.const 2)))`,
			log: "==> vkrt_v1.memory_record(label=1024,label_len=2)\n<== status=28", lastError: "got 2 B that are not UTF-8"},
		{name: "record a label holding a NUL", extra: `(data (i32.const 1024) "a\00b")`, body: `(drop (call $record (i32.const 1024) (i32.const 3)))`,
			log: "==> vkrt_v1.memory_record(label=1024,label_len=3)\n<== status=28", lastError: "without NUL, got 3 B with a NUL at 1"},
		{name: "record a label past 256 B", body: `(drop (call $record (i32.const 0) (i32.const 257)))`,
			log: "==> vkrt_v1.memory_record(label=0,label_len=257)\n<== status=28", lastError: "a label is 1 to 256 B of UTF-8 without NUL, got 257 B"},
		{name: "record, usage, dry mark and sync in order", extra: `(data (i32.const 1024) "after one buffer")`,
			body: create16 + `(drop (call $record (i32.const 1024) (i32.const 16))) (drop (call $usage (i32.const 64))) (drop (call $dry (i32.const 96))) (drop (call $sync))
			(drop (call $pbegin)) (drop (call $pbegin)) (drop (call $pend))`,
			log: create16Log + `
==> vkrt_v1.memory_record(label=1024,label_len=16)
<== status=0
==> vkrt_v1.memory_usage(out=64)
<== status=0
==> vkrt_v1.is_dry_run(out=96)
<== status=0
==> vkrt_v1.sync()
<== status=0
==> vkrt_v1.persistent_begin()
<== status=0
==> vkrt_v1.persistent_begin()
<== status=0
==> vkrt_v1.persistent_end()
<== status=0`},
	}
}

func expand(s string, reportLen int) string {
	if !strings.Contains(s, "%[1]d") {
		return s
	}
	return fmt.Sprintf(s, reportLen)
}

// TestABIStatuses runs each case as a guest of its own host and checks the
// host calls it made and their statuses, the way wazero's WASI tests
// check theirs. A guest that ends holds nothing.
func TestABIStatuses(t *testing.T) {
	c := openClient(t)
	empty, err := c.NewStream()
	require.NoError(t, err)
	report, err := json.Marshal(empty.Report())
	require.NoError(t, err)
	require.NoError(t, empty.Close())
	cases := abiCases(t)
	require.GreaterOrEqual(t, len(cases), 40)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, log := newLoggedHost(t, c)
			m := compile(t, h, guestWAT(t, tc.extra, tc.body))
			res, err := h.Run(context.Background(), m, tc.opts...)
			require.NoError(t, err)
			require.Equal(t, expand(tc.log, len(report)), hostCalls(log.String()))
			require.Contains(t, res.LastError, expand(tc.lastError, len(report)))
			require.Zero(t, liveBuffers(c), "the guest's buffers are freed when it ends")
		})
	}
}

// TestGuestWithoutMemory: a guest that defines no memory can still call
// the host; every range but an empty one at 0 is outside it.
func TestGuestWithoutMemory(t *testing.T) {
	c := openClient(t)
	h, log := newLoggedHost(t, c)
	m := compile(t, h, wat(t, `(module
  (import "vkrt_v1" "buffer_create" (func $create (param i64 i32) (result i32)))
  (import "vkrt_v1" "buffer_write" (func $write (param i32 i64 i32 i32) (result i32)))
  (import "vkrt_v1" "sync" (func $sync (result i32)))
  (func (export "_start")
    (drop (call $create (i64.const 16) (i32.const 0)))
    (drop (call $write (i32.const 1) (i64.const 0) (i32.const 0) (i32.const 0)))
    (drop (call $sync))))`))
	res, err := h.Run(context.Background(), m)
	require.NoError(t, err)
	require.Zero(t, res.MemoryPages)
	require.Equal(t, `==> vkrt_v1.buffer_create(size=16,out_handle=0)
<== status=21
==> vkrt_v1.buffer_write(handle=1,offset=0,src=0,len=0)
<== status=8
==> vkrt_v1.sync()
<== status=0`, hostCalls(log.String()))
}

// TestHostWithoutRecords: a host that keeps no records answers
// memory_record with ENOSYS, the function it does not provide.
func TestHostWithoutRecords(t *testing.T) {
	c := openClient(t)
	h, log := newLoggedHost(t, c, WithoutRecords())
	m := compile(t, h, guestWAT(t, `(data (i32.const 1024) "label")`, `(drop (call $record (i32.const 1024) (i32.const 5)))`))
	res, err := h.Run(context.Background(), m)
	require.NoError(t, err)
	require.Equal(t, "==> vkrt_v1.memory_record(label=1024,label_len=5)\n<== status=52", hostCalls(log.String()))
	require.Equal(t, "memory_record: this host keeps no records", res.LastError)
}

// TestRecordQuota: a guest cannot fill the host's disk with records.
func TestRecordQuota(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	m := compile(t, h, guestWAT(t, `(data (i32.const 1024) "again")`, `(local $i i32) (local $failed i32)
		(loop $l
			(if (call $record (i32.const 1024) (i32.const 5)) (then (local.set $failed (i32.add (local.get $failed) (i32.const 1)))))
			(local.set $i (i32.add (local.get $i) (i32.const 1)))
			(br_if $l (i32.lt_u (local.get $i) (i32.const 1100))))
		(call $exit (local.get $failed))`))
	res, err := h.Run(context.Background(), m)
	var exit *ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, uint32(1100-maxRecords), exit.Code, "every record past the quota was refused")
	require.Contains(t, res.LastError, "at most 1024 records")
}

// sync on a stream the host program closed under the guest (OnStream)
// fails as the buffer calls on it do (EIO); it answered 0.
func TestSyncOnAClosedStreamFails(t *testing.T) {
	c := openClient(t)
	h, log := newLoggedHost(t, c)
	s, err := c.NewStream()
	require.NoError(t, err)
	m := compile(t, h, wat(t, `(module
  (import "vkrt_v1" "buffer_create" (func $create (param i64 i32) (result i32)))
  (import "vkrt_v1" "sync" (func $sync (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fdwrite (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "\20\00\00\00\01\00\00\00x")
  (func (export "_start")
    (drop (call $fdwrite (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 8)))
    (drop (call $create (i64.const 16) (i32.const 0)))
    (drop (call $sync))))`))
	_, err = h.Run(context.Background(), m, OnStream(s), WithStdout(closingWriter{s}))
	require.NoError(t, err)
	require.True(t, s.Closed())
	require.Equal(t, `==> vkrt_v1.buffer_create(size=16,out_handle=0)
<== status=29
==> vkrt_v1.sync()
<== status=29`, hostCalls(log.String()))
}

// streamsNoGuestCanRunOn are a stream of c closed, and one of another
// client.
func streamsNoGuestCanRunOn(t *testing.T, c *client.Client) (closed, foreign *client.Stream) {
	t.Helper()
	closed, err := c.NewStream()
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	foreign, err = openClient(t).NewStream()
	require.NoError(t, err)
	return closed, foreign
}

// A closed or zero stream given with OnStream is refused as an invalid
// option before the guest is loaded, as another client's is: the guest
// ran, and each of its buffer calls failed with EIO.
func TestAClosedOrZeroStreamIsRefused(t *testing.T) {
	c := openClient(t)
	h, log := newLoggedHost(t, c)
	m := compile(t, h, guestWAT(t, "", `(drop (call $create (i64.const 16) (i32.const 0)))`))
	closed, foreign := streamsNoGuestCanRunOn(t, c)
	for _, tc := range []struct {
		s    *client.Stream
		kind error
		want string
	}{
		{closed, client.ErrClosed, "wasmhost: invalid option: OnStream: stream 1 is closed: client: closed"},
		{&client.Stream{}, client.ErrNil, "wasmhost: invalid option: OnStream: client: a nil or zero Client or Stream"},
		{foreign, client.ErrForeignStream, "wasmhost: invalid option: OnStream: client: the context's stream 1 belongs to another client"},
	} {
		res, err := h.Run(context.Background(), m, OnStream(tc.s))
		require.ErrorIs(t, err, ErrInvalidOption, tc.want)
		require.ErrorIs(t, err, tc.kind, tc.want)
		require.ErrorContains(t, err, tc.want)
		require.Nil(t, res, "no guest was loaded")
	}
	require.Empty(t, hostCalls(log.String()), "the guest never ran")
}

// A stream of another client is refused before the guest starts, where each
// of its buffer calls failed with EIO.
func TestAStreamOfAnotherClientIsRefused(t *testing.T) {
	c, other := openClient(t), openClient(t)
	h, log := newLoggedHost(t, c)
	s, err := other.NewStream()
	require.NoError(t, err)
	m := compile(t, h, guestWAT(t, "", `(drop (call $create (i64.const 16) (i32.const 0)))`))
	res, err := h.Run(context.Background(), m, OnStream(s))
	require.ErrorIs(t, err, client.ErrForeignStream)
	require.Nil(t, res, "no guest was loaded")
	require.Empty(t, hostCalls(log.String()), "the guest never ran")
}

// closingWriter closes a stream when the guest first writes to it.
type closingWriter struct{ s *client.Stream }

func (w closingWriter) Write(p []byte) (int, error) {
	_ = w.s.Close()
	return len(p), nil
}

// buffer_free that the guest's stream refuses (the host program closed it
// under the guest) changes nothing: the handle stays live, and a second
// free is refused as the first was (EIO); the first dropped the handle, so
// the second was EBADF for a handle the guest never freed.
func TestARefusedFreeKeepsTheHandle(t *testing.T) {
	c := openClient(t)
	h, log := newLoggedHost(t, c)
	s, err := c.NewStream()
	require.NoError(t, err)
	m := compile(t, h, wat(t, `(module
  (import "vkrt_v1" "buffer_create" (func $create (param i64 i32) (result i32)))
  (import "vkrt_v1" "buffer_free" (func $free (param i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fdwrite (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "\20\00\00\00\01\00\00\00x")
  (func (export "_start")
    (drop (call $create (i64.const 16) (i32.const 0)))
    (drop (call $fdwrite (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 8)))
    (drop (call $free (i32.load (i32.const 0))))
    (drop (call $free (i32.load (i32.const 0))))))`))
	_, err = h.Run(context.Background(), m, OnStream(s), WithStdout(closingWriter{s}))
	require.NoError(t, err, "the stream's Close freed the buffer the guest held")
	require.True(t, s.Closed())
	require.Equal(t, `==> vkrt_v1.buffer_create(size=16,out_handle=0)
<== status=0
==> vkrt_v1.buffer_free(handle=1048577)
<== status=29
==> vkrt_v1.buffer_free(handle=1048577)
<== status=29`, hostCalls(log.String()))
}

// A stream WithDefaults gives with OnStream that no guest can run on is
// refused by New, as Run refuses it: New made a host whose every Run was
// refused it.
func TestADefaultStreamNoGuestCanRunOnIsRefusedByNew(t *testing.T) {
	c := openClient(t)
	closed, foreign := streamsNoGuestCanRunOn(t, c)
	for _, tc := range []struct {
		s    *client.Stream
		kind error
		want string
	}{
		{closed, client.ErrClosed, fmt.Sprintf("wasmhost: invalid option: WithDefaults: OnStream: stream %d is closed: client: closed", closed.ID())},
		{&client.Stream{}, client.ErrNil, "wasmhost: invalid option: WithDefaults: OnStream: client: a nil or zero Client or Stream"},
		{foreign, client.ErrForeignStream, fmt.Sprintf("wasmhost: invalid option: WithDefaults: OnStream: client: the context's stream %d belongs to another client", foreign.ID())},
	} {
		h, err := New(context.Background(), c, WithDefaults(OnStream(tc.s)))
		require.ErrorIs(t, err, ErrInvalidOption, tc.want)
		require.ErrorIs(t, err, tc.kind, tc.want)
		require.ErrorContains(t, err, tc.want)
		require.Nil(t, h)
	}
	h := newHost(t, context.Background(), c, WithDefaults(OnStream(c.DefaultStream())))
	m := compile(t, h, guestWAT(t, "", `(drop (call $create (i64.const 16) (i32.const 0)))`))
	_, err := h.Run(context.Background(), m)
	require.NoError(t, err, "a stream of the host's client is taken")
}

// persistent_end after the host program closed the guest's window on the
// stream it gave (OnStream) answers EINVAL with the client's words, as
// one with no window open does: it answered 0, closing nothing. The guest
// holds no window after, and its end closes none of the stream's.
func TestPersistentEndAfterTheHostClosedTheWindow(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	s, err := c.NewStream()
	require.NoError(t, err)
	m := compile(t, h, wat(t, watPreludeWithWrite+`(data (i32.const 16) "\20\00\00\00\01\00\00\00x")
  (func (export "_start")
    (if (call $pbegin) (then unreachable))
    (drop (call $fdw (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 8)))
    (call $exit (call $pend))))`))
	res, err := h.Run(context.Background(), m, OnStream(s), WithStdout(windowEndingWriter{s}))
	var exit *ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, uint32(EINVAL), exit.Code, "persistent_end's status")
	require.Contains(t, res.LastError, "persistent_end: the host program closed the guest's persistent windows on its stream: client: no persistent window is open")
	require.ErrorIs(t, s.EndPersistent(), client.ErrNoPersistentWindow, "the stream has no window open")
}

// windowEndingWriter closes a persistent window of a stream when the guest
// writes to it.
type windowEndingWriter struct{ s *client.Stream }

func (w windowEndingWriter) Write(p []byte) (int, error) {
	_ = w.s.EndPersistent()
	return len(p), nil
}
