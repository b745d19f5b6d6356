package main

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/runtime/environment"
	"github.com/vkrt/vkrt/wasmhost"
)

// madeFiles are the files and directories that opening an environment
// will make, taken away again by remove when the run that opened it is
// refused before its guest starts: bad input leaves nothing behind.
type madeFiles struct {
	file string // the environment's file; "" where it exists already
	top  string // the highest of its directories that does not exist yet
}

// environmentToMake is what opening environment name will make.
func environmentToMake(name string) madeFiles {
	path, err := environment.Path(name)
	if err != nil {
		return madeFiles{} // the client refuses the name itself
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return madeFiles{}
	}
	m := madeFiles{file: path}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) || dir == filepath.Dir(dir) {
			break
		}
		m.top = dir
	}
	return m
}

// remove takes away the environment's file, the files SQLite keeps beside
// it, and the directories that were made for it, where they are empty. An
// environment another process opened meanwhile stays: one it wrote records
// into, and one it holds open (SQLite keeps the log and its index beside
// the file while a process has it open, and removes them with the last
// one). Removed all the same, a run refused while another wrote into the
// environment it was to make took the other's records with it.
func (m madeFiles) remove() {
	if m.file == "" || environmentInUse(m.file) {
		return
	}
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		os.Remove(m.file + suffix)
	}
	if m.top == "" {
		return
	}
	for dir := filepath.Dir(m.file); ; dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil || dir == m.top {
			return
		}
	}
}

// environmentInUse says whether the environment whose file is path is open
// in a process or holds records; true where that cannot be read. A process
// making the environment writes its schema in one transaction, with a
// rollback journal beside the file, before it takes up the log.
func environmentInUse(path string) bool {
	for _, side := range []string{"-wal", "-shm", "-journal"} {
		if _, err := os.Lstat(path + side); !errors.Is(err, fs.ErrNotExist) {
			return true
		}
	}
	env, err := environment.Open(strings.TrimSuffix(filepath.Base(path), ".sqlite"), environment.WithDir(filepath.Dir(path)), environment.ReadOnly())
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	defer env.Close()
	kinds, err := env.Kinds(context.Background())
	return err != nil || len(kinds) > 0
}

// damagedCacheEntry says whether a module was refused for an entry of the
// compilation cache that wazero could not read back (a checksum that does
// not match, a file cut short): wazero says so in its message only.
func damagedCacheEntry(err error) bool {
	return strings.Contains(err.Error(), "compilationcache: ")
}

// compileThroughFreshCache compiles wasm on a host of its own whose
// compilation cache starts empty, then copies the entries it wrote over
// those of cacheDir: the damaged one is replaced, and the next run reads
// the cache again.
func compileThroughFreshCache(ctx context.Context, c *client.Client, hostOpts []wasmhost.Option, cacheDir string, wasm []byte) (*wasmhost.Host, *wasmhost.Module, error) {
	fresh, err := os.MkdirTemp("", "vkrt-compile-cache-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(fresh)
	h, err := wasmhost.New(ctx, c, append(hostOpts, wasmhost.WithCompilationCacheDir(fresh))...)
	if err != nil {
		return nil, nil, err
	}
	m, err := h.Compile(ctx, wasm)
	if err != nil {
		h.Close(ctx)
		return nil, nil, err
	}
	// The copy is best effort: the guest runs either way.
	_ = filepath.WalkDir(fresh, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(fresh, path)
		if err != nil {
			return err
		}
		return replaceFile(path, filepath.Join(cacheDir, rel))
	})
	return h, m, nil
}

// replaceFile writes src's bytes over dst as writeOutput writes a file:
// through a temporary file beside it, renamed into place.
func replaceFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return writeOutput("--compile-cache", dst, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
