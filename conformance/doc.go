// Package conformance is the suite a vkrt backend or device vendor runs to
// learn whether it honours vkrt's contract, in the manner of
// testing/fstest.TestFS: the implementer hands it a factory and it checks
// everything, reporting every misbehaviour at once with the rule it broke.
//
//   - [TestStorage] checks any runtime.Storage: allocation, release and flush
//     semantics, size accounting, alignment of every page and slice, out of
//     memory under a limit, transfers at odd ranges and their bounds, the
//     integrity of every byte through churn across every pool kind and
//     layout, and, where the storage has sparse residency, binding (binds
//     off the granule refused as runtime.ErrInvalidArgument), the sparse
//     address space and the release of virtual ranges; where a sparse
//     storage has none, virtual ranges refused as runtime.ErrUnsupported.
//   - [TestDevice] checks a whole device through the client: the storage
//     checks on the device's own storage, zero-initialised buffers, transfers
//     at odd offsets and sizes and of partial ranges, the storage's figures,
//     every built-in kernel against a CPU reference (exactly where the
//     kernel package says a kernel is exact, infinities included, up to
//     65,537 elements, its inputs and the buffers beside its output left
//     as they were), the largest binding the device claims (up to 64 MiB)
//     and transfers deep into it, dispatches (a batch
//     checked before any op runs, batch order, the grid, cancellation),
//     dry-run fidelity, measured plans, the install errors (invalid layout,
//     pools in use, stream unavailable), a lost device, the errors of a
//     closed one (runtime.ErrClosed), records and concurrent streams. A
//     client is opened per check by an [OpenClient] ([OnDevice] for a
//     device.Opener, [DefaultDevice] for the backend linked in), so a check
//     can ask for a memory limit or wrap the device.
//
// Both run under go test (one subtest per check, a failure naming the rule
// and the evidence) and outside it ([RunStorage], [RunDevice]; the command
// `vkrt conformance`), where a [Report] is written as a table, JSON or JUnit
// XML.
//
// Every check has a stable name and a rule. Its result is pass, fail, or
// not supported: a capability the target lacks (a memory limit, host access
// to its bytes, a memory budget, sparse binding) is probed, and a check that
// needs it says so rather than passing. A panic in a check, or in a
// goroutine it started, fails that check, as does a target that ends the
// check's goroutine (runtime.Goexit, which t.Fatal on a *testing.T of the
// target's own calls) and a check that runs past its time
// ([DefaultTimeout], or Options.Timeout outside go test; under go test
// less, where the test's deadline (-timeout) is near, so that the checks
// are reported before it), one that does not stop then showing where its
// goroutines were; the suite goes on. A run whose context ends stops: its [Report] holds the checks
// finished and names the rest, the one it stopped first, as not run. Data
// races are for the race detector: run TestDevice under go test -race, as
// no check can see one.
package conformance
