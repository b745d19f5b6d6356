// Package dryrun marks a context as a dry run: the same allocation stream as
// the real run, no compute, no device memory behind its pages. [With] and
// [RealRun] set the mark, [Active] and [Mapping] read it; a nil context
// carries none, and runs for real.
//
// What a dry run measures is used by the subpackages: [trace] reads and
// writes allocation streams, [replay] drives the memory pools over one on a
// storage that holds no memory, and [plan] turns a dry run into a layout
// for the real run.
//
// [trace]: https://pkg.go.dev/github.com/vkrt/vkrt/dryrun/trace
// [replay]: https://pkg.go.dev/github.com/vkrt/vkrt/dryrun/replay
// [plan]: https://pkg.go.dev/github.com/vkrt/vkrt/dryrun/plan
package dryrun
