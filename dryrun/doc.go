// Package dryrun makes vkrt's memory plans measured instead of guessed.
//
// A workload runs once as a dry run: the same allocation stream, no compute,
// no device memory behind its pages. The marks [With] and [RealRun] carry
// that state through a [context.Context]. The pools' report after the dry run,
// or the exact stream recorded as a [Trace], is turned by [Plan] into a
// layout the memory manager installs for the real run.
//
// Trace replay ([Replay]) drives a memory manager over a [CountingStorage],
// a storage that counts device allocations and holds no memory, so a plan
// can be checked against a real model's allocation stream on any machine.
package dryrun
