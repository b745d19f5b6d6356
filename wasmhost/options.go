package wasmhost

import (
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/vkrt/vkrt/client"
)

// DefaultMaxMemoryPages is the guest memory limit when WithMaxMemoryPages is
// not given: 16384 pages of 64 KiB, 1 GiB.
const DefaultMaxMemoryPages = 16384

// MaxMemoryPages is the most memory a host can grant a guest: one page short
// of 4 GiB. wazero traps every load and store of a 4 GiB memory, and its
// api.Memory slices a range that ends at 2^32 in 32-bit arithmetic, which
// panics inside the host call.
const MaxMemoryPages = 65535

// DefaultMaxTableEntries is the most entries a guest's WebAssembly table
// (of functions, for call_indirect) may declare when WithMaxTableEntries is
// not given: 2^20, 8 MiB of host memory a guest, as wazero keeps 8 bytes an
// entry. Go guests declare about 6,000 (the examples and the SDK's tests,
// Go 1.26).
const DefaultMaxTableEntries = 1 << 20

// DefaultMaxHandles is the handle quota when WithMaxHandles is not given.
const DefaultMaxHandles = 1 << 17

// maxTableHandles is how many handles one guest's table can name at once:
// the index part of a handle is 20 bits.
const maxTableHandles = 1<<indexBits - 1

type hostConfig struct {
	maxMemoryPages  uint32
	maxTableEntries uint32
	cacheDir        string
	records         bool
	run             runConfig
	// invalid is the first option WithDefaults could not follow (a nil
	// RunOption), which New refuses.
	invalid error
}

type runConfig struct {
	deadline       time.Duration
	maxDeviceBytes uint64
	maxHandles     uint32
	args           []string
	env            [][2]string
	dirs           [][2]string // host directory, guest path; read-only
	stdout, stderr io.Writer
	clocks         bool
	randomness     bool
	stream         *client.Stream
}

// Option configures New: limits of the host as a whole, and the defaults of
// every guest's run. Each option works on its own copy of the configuration,
// so option values can be reused.
type Option func(hostConfig) hostConfig

// WithMaxMemoryPages limits each guest's linear memory to pages of 64 KiB
// (1 to MaxMemoryPages); a guest whose memory starts larger is refused by
// Compile (a *MemoryLimitError), one that grows past it sees memory.grow
// fail. A small limit is not refused: a guest written by hand may need a
// page or none, while Go guests start at about 45 pages (Go 1.26) and grow
// their heap from there. The default is DefaultMaxMemoryPages.
func WithMaxMemoryPages(pages uint32) Option {
	return func(c hostConfig) hostConfig { c.maxMemoryPages = pages; return c }
}

// WithMaxTableEntries limits each guest's WebAssembly table to entries
// entries; a guest that declares a larger one is refused by Compile
// (ErrRefused, naming both numbers). A table is host memory outside
// WithMaxMemoryPages, 8 bytes an entry, and no guest can grow its table
// (the host leaves the reference-types feature off, which also limits a
// guest to one table). 0 is a limit, not the default: it allows no table,
// so only guests that declare none (or an empty one), such as guests
// written by hand that make no indirect call, load. Go guests declare
// about 6,000 entries (Go 1.26) and are refused below that. The default is
// DefaultMaxTableEntries.
func WithMaxTableEntries(entries uint32) Option {
	return func(c hostConfig) hostConfig { c.maxTableEntries = entries; return c }
}

// WithCompilationCacheDir keeps compiled guests in dir, so a host started
// again (another process included) loads a guest it has seen without
// compiling it. An empty dir keeps none.
func WithCompilationCacheDir(dir string) Option {
	return func(c hostConfig) hostConfig { c.cacheDir = dir; return c }
}

// WithoutRecords makes memory_record answer ENOSYS: guests of this host
// write nothing into the client's environment.
func WithoutRecords() Option {
	return func(c hostConfig) hostConfig { c.records = false; return c }
}

// WithDefaults makes opts the defaults of every run of the host; Run's own
// options come after them. A nil RunOption among them fails New with
// ErrInvalidOption.
func WithDefaults(opts ...RunOption) Option {
	return func(c hostConfig) hostConfig {
		for i, o := range opts {
			if o == nil {
				if c.invalid == nil {
					c.invalid = nilOption("WithDefaults", i, len(opts))
				}
				continue
			}
			c.run = o(c.run)
		}
		return c
	}
}

// check says what of c WASI cannot pass to a guest: arguments and
// environment variables it would take apart or cut short. wazero refused
// them only as the guest was loaded, an error Run blamed on the module
// (ErrRefused).
func (c runConfig) check() error {
	for i, a := range c.args {
		if at := strings.IndexByte(a, 0); at >= 0 {
			return fmt.Errorf("WithArgs: argument %d, %q, holds a NUL byte at %d; WASI passes arguments as NUL-terminated strings",
				i, abbreviate([]byte(a)), at)
		}
	}
	for _, kv := range c.env {
		name, value := kv[0], kv[1]
		switch {
		case name == "":
			return errors.New("WithEnv: an empty name")
		case strings.ContainsRune(name, '='):
			return fmt.Errorf("WithEnv: the name %q holds '='; WASI passes a variable as name=value", abbreviate([]byte(name)))
		case strings.IndexByte(name, 0) >= 0:
			return fmt.Errorf("WithEnv: the name %q holds a NUL byte; WASI passes a variable as a NUL-terminated string", abbreviate([]byte(name)))
		case strings.IndexByte(value, 0) >= 0:
			// The value is not shown: it may be a secret.
			return fmt.Errorf("WithEnv: the value of %q holds a NUL byte at %d; WASI passes a variable as a NUL-terminated string",
				abbreviate([]byte(name)), strings.IndexByte(value, 0))
		}
	}
	return checkDirs(c.dirs)
}

// checkDirs says what of dirs ([host, guest] pairs, WithReadOnlyDir) no
// guest can be granted: an empty host directory or guest path, one holding
// a NUL byte, a guest path that is not absolute or not clean (wazero
// takes "data", "./data" and "/data/" for "/data", and "/a/../b" for a
// directory named so), and a guest path granted twice, where the later
// grant silently hid the earlier.
func checkDirs(dirs [][2]string) error {
	granted := make(map[string]string, len(dirs))
	for _, d := range dirs {
		host, guest := d[0], d[1]
		switch {
		case host == "":
			return fmt.Errorf("WithReadOnlyDir: the host directory for %q is empty", guest)
		case strings.IndexByte(host, 0) >= 0:
			return fmt.Errorf("WithReadOnlyDir: the host directory %q holds a NUL byte", host)
		case guest == "":
			return fmt.Errorf("WithReadOnlyDir: the guest path for %q is empty; want an absolute path (\"/\" for the root)", host)
		case strings.IndexByte(guest, 0) >= 0:
			return fmt.Errorf("WithReadOnlyDir: the guest path %q holds a NUL byte", guest)
		case !path.IsAbs(guest):
			return fmt.Errorf("WithReadOnlyDir: the guest path %q is relative; want an absolute path such as %q", guest, path.Join("/", guest))
		case path.Clean(guest) != guest:
			return fmt.Errorf("WithReadOnlyDir: the guest path %q is not clean; want %q", guest, path.Clean(guest))
		}
		if before, ok := granted[guest]; ok {
			return fmt.Errorf("WithReadOnlyDir: the guest path %q is granted twice, %q and %q; a guest path takes one directory",
				guest, before, host)
		}
		granted[guest] = host
	}
	return nil
}

// nilOption is the refusal of the option at index i of the n given to
// where: a nil one, which panicked when called.
func nilOption(where string, i, n int) error {
	return fmt.Errorf("%w: option %d of the %d given to %s is nil", ErrInvalidOption, i+1, n, where)
}

// RunOption configures one run of a guest.
type RunOption func(runConfig) runConfig

// WithDeadline ends the guest when d has passed since it started (0 or
// less: no deadline beyond the context's own).
func WithDeadline(d time.Duration) RunOption {
	return func(c runConfig) runConfig { c.deadline = d; return c }
}

// WithMaxDeviceBytes is the guest's quota of device bytes: the sizes of its
// live buffers together, as asked. Past it buffer_create answers EDQUOT.
// 0 means no quota beyond the device and the pools.
//
// A quota also bounds the device memory the guest's pools reserve, under
// the host's layout or one the guest installed (memory_install), however
// it allocates (fragmenting the pools, persistent allocations of many
// sizes, many small buffers each padded to the alignment): at most twice
// the quota plus one page of each default pool a buffer within the quota
// reaches. That is the default layout's sliced pools' pages (on a device
// whose pages reach 256 MiB: 2 MiB, then 8 MiB for a quota past 512 KiB,
// 32 MiB past 2 MiB, 128 MiB past 8 MiB, 256 MiB past 32 MiB), or on a
// device with sparse residency one 20 MiB chunk of the virtual pool
// (memory.VirtualChunkUnit) if that is more: what the default layout
// itself reserves for a guest within its quota. memory_install answers
// EDQUOT for an arena whose pages together pass the bound. buffer_create
// answers EDQUOT, making nothing, for a size that goes to a pool of an
// installed layout whose pages pass it, and for a buffer that would take
// the pools past it even after a cleanup of their free pages: the buffer
// is reserved without device memory first, so the device never holds more
// than the bound for the guest, not even for a moment. The cleanup is of
// the guest's own pools only (Stream.MemoryCleanup), made when it freed a
// buffer since its last, or its stream (OnStream) held pages when it
// started; a refused buffer's pages are returned at once.
func WithMaxDeviceBytes(n uint64) RunOption {
	return func(c runConfig) runConfig { c.maxDeviceBytes = n; return c }
}

// WithMaxHandles is the guest's quota of live buffer handles; past it
// buffer_create answers EDQUOT. The default is DefaultMaxHandles, which 0
// also means; the table holds at most 2^20 - 1, and a larger quota is
// that. (vkrt run refuses 0 and a larger quota as flags.)
func WithMaxHandles(n uint32) RunOption {
	return func(c runConfig) runConfig { c.maxHandles = min(n, maxTableHandles); return c }
}

// WithArgs grants the guest command-line arguments (argv[0] included, if
// the guest expects one). Without it the guest has none. WASI passes them
// as NUL-terminated strings, so an argument holding a NUL byte is refused
// (ErrInvalidOption): by New where WithDefaults gives it, else by Run.
func WithArgs(args ...string) RunOption {
	return func(c runConfig) runConfig { c.args = append([]string(nil), args...); return c }
}

// WithEnv grants the guest an environment variable. Without it the guest's
// environment is empty. A name that is empty or holds '=' or a NUL byte,
// and a value that holds a NUL byte, cannot be passed as "name=value" and
// are refused (ErrInvalidOption): by New where WithDefaults gives it, else
// by Run. A name given again replaces the value given before.
func WithEnv(name, value string) RunOption {
	return func(c runConfig) runConfig {
		c.env = append(append([][2]string(nil), c.env...), [2]string{name, value})
		return c
	}
}

// WithReadOnlyDir grants the guest a host directory, read-only, at
// guestPath. Without it the guest has no filesystem. No path or symbolic
// link in it leads outside it, and the guest reads only its regular files
// and directories: a FIFO, device or socket it may list and stat, but a
// read of one is refused (EPERM), since it could hold the guest inside the
// host's call past its deadline. guestPath is absolute and clean ("/data",
// "/" for the root), and takes one directory: an empty host directory or
// guest path, one holding a NUL byte, a relative or unclean guest path
// ("data", "/data/", "/a/../b") and a guest path granted twice (by
// WithDefaults and Run's options together too) are refused
// (ErrInvalidOption): by New where WithDefaults gives them, else by Run.
// A directory that cannot be opened fails Run with ErrInvalidOption
// before anything is made for the guest.
func WithReadOnlyDir(hostDir, guestPath string) RunOption {
	return func(c runConfig) runConfig {
		c.dirs = append(append([][2]string(nil), c.dirs...), [2]string{hostDir, guestPath})
		return c
	}
}

// WithStdout and WithStderr are where the guest's output goes; without
// them it is discarded. A guest whose write blocks (a pipe nobody reads)
// ends at its deadline, or when the host closes, as a sleeping one does;
// the write it was ended in goes on without it. A write the writer fails,
// or panics in, fails the guest's write (EIO).
func WithStdout(w io.Writer) RunOption {
	return func(c runConfig) runConfig { c.stdout = w; return c }
}

// WithStderr: see WithStdout.
func WithStderr(w io.Writer) RunOption {
	return func(c runConfig) runConfig { c.stderr = w; return c }
}

// WithClocks grants the guest the host's real clocks and sleep. Without it
// the guest sees wazero's deterministic clocks, and no timing of the host.
// A guest asleep at its deadline, or when the host closes, ends then.
func WithClocks() RunOption {
	return func(c runConfig) runConfig { c.clocks = true; return c }
}

// WithRandomness gives the guest's WASI random_get the host's
// cryptographic source (crypto/rand). Without it random_get is wazero's
// deterministic source: the same bytes in every run, so a dry run and the
// run it plans see the same stream, and no guest should take them for
// secrets or unique ids.
func WithRandomness() RunOption {
	return func(c runConfig) runConfig { c.randomness = true; return c }
}

// OnStream runs the guest on s instead of a stream of its own; what the
// guest still holds when it ends is freed, and s stays open. A measurement
// (client.MeasurePlan) runs a guest on the stream it measures this way.
// A stream of another client than the host's (client.ErrForeignStream), a
// zero one (client.ErrNil) and a closed one (client.ErrClosed) are refused
// with an error that matches ErrInvalidOption too: by New where
// WithDefaults gives it, else by Run before the guest is loaded.
// A quota (WithMaxDeviceBytes) bounds what the stream's pools reserve,
// which are shared: on a stream where others hold buffers (the host, a
// guest run on it at the same time) theirs count against the guest's
// quota, and a refusal's last_error gives the stream's figures. Give a
// guest under a quota a stream of its own.
func OnStream(s *client.Stream) RunOption {
	return func(c runConfig) runConfig { c.stream = s; return c }
}
