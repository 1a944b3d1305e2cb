package kopiarepo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/kopia/kopia/fs"
	"golang.org/x/sys/unix"

	"github.com/okgoes/okgoes-operator/internal/statmode"
)

// A restore writes the tree itself (restore.go) rather than with kopia's FilesystemOutput: with
// WriteSparseFiles, kopia copies through a buffer of one filesystem block and makes a system
// call (a write or a seek) per 4 KiB block, and compares each block with zero byte by byte:
// 17 % of the CPU of a restore of 1 MiB files. writeRestoredFile keeps kopia's result (runs of
// zero blocks left as holes, then owner, mode and times, permission errors on the owner
// ignored) with one pwrite per run of data up to writeBufferBytes, on a bare descriptor: an
// os.File first tries, and fails, to register a regular file with the network poller, one more
// system call per file of a tree of small files.

const (
	// writeBufferBytes is how much of a file is read before it is written.
	writeBufferBytes = 1 << 20
	// holeBlockBytes is the granularity of holes: a filesystem block.
	holeBlockBytes = 4 << 10
)

var (
	writeBuffers = sync.Pool{New: func() any { b := make([]byte, writeBufferBytes); return &b }}
	zeroBlock    = make([]byte, holeBlockBytes)
)

// writeRestoredFile writes the file f of the snapshot to path, and sets its owner (where the
// process may), mode and modification time. What is at path is replaced, never written
// through: a symlink there is removed, not followed. Nothing at path is touched before the
// file's first writeBufferBytes were read, which takes its whole first chunk, checked against
// its hash: a damaged backup does not cost the file there its content (a file of one chunk is
// checked whole; a later chunk of a larger one fails after the file was replaced). It fails
// when the object holds another number of bytes than the snapshot's entry says.
func writeRestoredFile(ctx context.Context, path string, f fs.File) (err error) {
	r, err := f.Open(ctx)
	if err != nil {
		return fmt.Errorf("open %q in the snapshot: %w", f.Name(), err)
	}
	defer r.Close()                    //nolint:errcheck // read only
	bp := writeBuffers.Get().(*[]byte) //nolint:forcetypeassert // the pool's own
	defer writeBuffers.Put(bp)
	buf := *bp
	n, rerr := io.ReadFull(r, buf)
	if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF) {
		return rerr //nolint:wrapcheck // kopia's read error names the object
	}
	fd, err := createFile(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := syscall.Close(fd); err == nil && cerr != nil {
			err = &iofs.PathError{Op: "close", Path: path, Err: cerr}
		}
	}()
	out := fdFile{fd, path}
	end, err := writeRuns(out, buf[:n], 0)
	if err != nil {
		return err
	}
	size := int64(n)
	if rerr == nil { // more than one buffer
		more, e, err := copySparse(out, r, buf, size, end)
		end = e
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		size += more
	}
	if size != f.Size() {
		return fmt.Errorf("write %s: the snapshot's object holds %d bytes, its entry says %d", path, size, f.Size())
	}
	if end < size { // ends in a hole
		if err := syscall.Ftruncate(fd, size); err != nil {
			return &iofs.PathError{Op: "truncate", Path: path, Err: err}
		}
	}
	if err := setOwnerAndMode(out, f); err != nil {
		return err
	}
	return setTimes(path, f.ModTime(), 0)
}

// createFile creates a new file at path, and returns its descriptor. O_EXCL and O_NOFOLLOW: a
// file is created here, not reached through a link; a file, symlink or empty directory already
// there is removed first (replaceable).
func createFile(path string) (int, error) {
	const flags = syscall.O_WRONLY | syscall.O_CREAT | syscall.O_EXCL | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
	fd, err := syscall.Open(path, flags, 0o600)
	if errors.Is(err, syscall.EEXIST) {
		if err = replaceable(path); err == nil {
			fd, err = syscall.Open(path, flags, 0o600)
		}
	}
	if err != nil {
		var pe *iofs.PathError
		if errors.As(err, &pe) {
			return -1, err
		}
		return -1, &iofs.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// replaceable removes the file, symlink or empty directory at path, so that a new entry can be
// made there, as the archive engine does. A directory with entries is kept, and reported.
func replaceable(path string) error {
	err := os.Remove(path)
	if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		return &iofs.PathError{Op: "restore", Path: path, Err: errors.New("a directory with entries is in the way")}
	}
	return err //nolint:wrapcheck // names the path
}

// fdFile writes to a file descriptor at an offset; path names it in errors.
type fdFile struct {
	fd   int
	path string
}

func (w fdFile) writeAt(p []byte, off int64) error {
	for len(p) > 0 {
		n, err := syscall.Pwrite(w.fd, p, off)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &iofs.PathError{Op: "write", Path: w.path, Err: err}
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// copySparse writes the rest of r to out from offset off, skipping the blocks of zeros (the file
// is extended to its length afterwards, so they read as zeros). It returns how many bytes it
// read and the new end of the data written.
func copySparse(out fdFile, r io.Reader, buf []byte, off, end int64) (read, newEnd int64, err error) {
	for {
		n, rerr := io.ReadFull(r, buf)
		e, err := writeRuns(out, buf[:n], off+read)
		if err != nil {
			return read, end, err
		}
		if e > 0 {
			end = e
		}
		read += int64(n)
		switch {
		case errors.Is(rerr, io.EOF), errors.Is(rerr, io.ErrUnexpectedEOF):
			return read, end, nil
		case rerr != nil:
			return read, end, rerr //nolint:wrapcheck // kopia's read error names the object
		}
	}
}

// writeRuns writes the runs of non-zero blocks of data, which starts at off in the file, and
// returns the end of the last run it wrote, or 0 when data is all zeros.
func writeRuns(out fdFile, data []byte, off int64) (int64, error) {
	var end int64
	start := -1 // start of the current run of data
	for i := 0; i < len(data); i += holeBlockBytes {
		block := data[i:min(i+holeBlockBytes, len(data))]
		zero := bytes.Equal(block, zeroBlock[:len(block)])
		switch {
		case !zero && start < 0:
			start = i
		case zero && start >= 0:
			if err := out.writeAt(data[start:i], off+int64(start)); err != nil {
				return 0, err
			}
			end = off + int64(i)
			start = -1
		}
	}
	if start >= 0 {
		if err := out.writeAt(data[start:], off+int64(start)); err != nil {
			return 0, err
		}
		end = off + int64(len(data))
	}
	return end, nil
}

// setOwnerAndMode gives out the owner of e where the process may (kopia's restore ignores a
// refusal too, with IgnorePermissionErrors), then its mode (after the owner: chown clears the
// setuid bit).
func setOwnerAndMode(out fdFile, e fs.Entry) error {
	want := e.Owner()
	if err := syscall.Fchown(out.fd, int(want.UserID), int(want.GroupID)); err != nil && !isPermission(err) {
		return &iofs.PathError{Op: "chown", Path: out.path, Err: err}
	}
	// fchmod takes the Unix bits: Go's fs.ModeSetuid, ModeSetgid and ModeSticky are not them.
	if err := syscall.Fchmod(out.fd, statmode.Unix(e.Mode())); err != nil {
		return &iofs.PathError{Op: "chmod", Path: out.path, Err: err}
	}
	return nil
}

// isPermission says whether err is a refusal for want of privilege, as kopia's
// IgnorePermissionErrors takes it.
func isPermission(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES)
}

// setTimes sets the access and modification times of path to mtime; flags is 0 or
// unix.AT_SYMLINK_NOFOLLOW (the times of a symlink itself).
func setTimes(path string, mtime time.Time, flags int) error {
	ts, err := unix.TimeToTimespec(mtime)
	if err != nil {
		return &iofs.PathError{Op: "chtimes", Path: path, Err: err}
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{ts, ts}, flags); err != nil {
		return &iofs.PathError{Op: "chtimes", Path: path, Err: err}
	}
	return nil
}
