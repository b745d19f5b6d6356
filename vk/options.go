package vk

// Option configures Open. Options follow the module's one style: each
// takes the configuration by value and returns it changed, so an option
// value can be kept and reused; Open checks the result as a whole.
type Option func(config) config

type config struct {
	memoryLimit    uint64
	memoryFraction float64
	fractionSet    bool
	validation     bool
	staged         bool
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		c = o(c)
	}
	return c
}

// WithMemoryLimit caps the bytes the device's storage may hold at once; an
// allocation past it fails with *runtime.OutOfMemoryError before it reaches
// the driver. 0 means no limit beyond the heap.
func WithMemoryLimit(bytes uint64) Option {
	return func(c config) config { c.memoryLimit = bytes; return c }
}

// WithMemoryFraction caps the storage at a fraction (0, 1] of the heap it
// allocates from, like PyTorch's per-process memory fraction. With
// WithMemoryLimit too, the smaller cap wins. Open refuses a fraction outside
// (0, 1] and one that leaves less than a byte.
func WithMemoryFraction(f float64) Option {
	return func(c config) config { c.memoryFraction, c.fractionSet = f, true; return c }
}

// WithValidation enables the Khronos validation layer with a messenger that
// turns every validation error into an error of the call that caused it (and
// of Close). Open fails when the layer is not installed.
func WithValidation(on bool) Option {
	return func(c config) config { c.validation = on; return c }
}

// WithStagedTransfers makes transfers go through a staging buffer even where
// the storage's memory is host-visible (pages are then never mapped): the
// path discrete GPUs take, available everywhere for testing and measuring.
func WithStagedTransfers() Option {
	return func(c config) config { c.staged = true; return c }
}
