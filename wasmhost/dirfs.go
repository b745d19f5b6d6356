package wasmhost

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// guestDir is a host directory as a guest reads it (WithReadOnlyDir):
// through an os.Root, so that no path or symbolic link leads outside it
// (wazero's own directory mount followed a link in it to any file of the
// host), and with only its regular files and directories opened on the
// host. Opening a FIFO blocks until a writer comes, and reading a device or
// a socket may block for ever: the guest sat inside the host's open or
// read, past its deadline and Close. Any other file the guest may list and
// stat (wazero stats a file by opening it), but not read.
type guestDir struct {
	root      *os.Root
	fsys      fs.FS // root.FS()
	guestPath string
}

func (d guestDir) Open(name string) (fs.File, error) {
	info, err := fs.Stat(d.fsys, name)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			// A path the root refuses (one leading outside it) reads as a
			// file the guest may not open, not as an I/O error.
			err = &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
		}
		return nil, err
	}
	if !info.Mode().IsRegular() && !info.IsDir() {
		return unreadable{name, info}, nil
	}
	return d.fsys.Open(name)
}

// unreadable is a file of a granted directory that is neither regular nor
// a directory: it stats as the host's, and reads nothing.
type unreadable struct {
	name string
	info fs.FileInfo
}

func (u unreadable) Stat() (fs.FileInfo, error) { return u.info, nil }

func (u unreadable) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: u.name, Err: fs.ErrPermission}
}

func (u unreadable) Close() error { return nil }

// openGuestDirs opens the directories of dirs ([host, guest] pairs) as
// guests read them; closeGuestDirs closes them after the run.
func openGuestDirs(dirs [][2]string) ([]guestDir, error) {
	var out []guestDir
	for _, d := range dirs {
		root, err := os.OpenRoot(d[0])
		if err != nil {
			closeGuestDirs(out)
			// The host's option, not the module, is at fault.
			return nil, fmt.Errorf("%w: WithReadOnlyDir: the directory granted at %s: %w", ErrInvalidOption, d[1], err)
		}
		out = append(out, guestDir{root: root, fsys: root.FS(), guestPath: d[1]})
	}
	return out, nil
}

func closeGuestDirs(dirs []guestDir) {
	for _, d := range dirs {
		d.root.Close()
	}
}
