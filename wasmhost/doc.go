// Package wasmhost runs untrusted WebAssembly workloads on a vkrt client
// through the guest ABI vkrt_v1 (ABI.md in this directory), on wazero.
//
// A Host serves one client; its guests run concurrently, each on a stream
// of its own (or one given with OnStream), with handles of its own: a u32
// per buffer, never 0, generation-checked, so a guest never reaches a
// device address, another guest's buffer or a buffer it freed. Every host
// call bounds-checks the guest memory it touches as one overflow-safe range
// and answers a WASI errno (Errno); the message of the last failure waits
// for last_error. Whatever a guest holds is freed when it ends, however it
// ends, and a guest that traps, runs past its deadline (WithDeadline),
// outgrows its memory limit (WithMaxMemoryPages) or exits ends alone.
// Quotas of device bytes and handles (WithMaxDeviceBytes, WithMaxHandles)
// answer EDQUOT; a quota of device bytes also bounds what the guest's
// pools reserve, whatever its layout and allocation pattern. Tables, host
// memory outside the memory limit, are held to one a guest, of at most
// WithMaxTableEntries entries, which it cannot
// grow: guests are WebAssembly 2.0 without reference types. WASI is
// provided with no filesystem, environment or arguments unless a run
// grants them.
//
// A run under a context marked with dryrun.With is a dry run: the guest's
// pools see every buffer while the device holds none of them, which is how
// client.MeasurePlan measures a guest (`vkrt plan`). Compiled guests can be
// kept in a directory (WithCompilationCacheDir) so a restarted host does
// not compile them again.
//
//	h, _ := wasmhost.New(ctx, c, wasmhost.WithCompilationCacheDir(dir))
//	m, _ := h.Compile(ctx, wasm)               // ErrRefused: not a guest of this host
//	res, err := h.Run(ctx, m, wasmhost.WithDeadline(time.Minute))
//
// An option New or Run cannot follow (a nil one, an argument or environment
// variable WASI cannot pass, a directory granted at a guest path that is
// empty, relative or taken) is refused with ErrInvalidOption before
// anything is made: the guest is not to blame.
//
// Go guests are written with package wasmhost/guest.
package wasmhost
