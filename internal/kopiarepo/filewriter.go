package kopiarepo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/snapshot/restore"
)

// A restore writes files itself rather than with kopia's FilesystemOutput.WriteFile: with
// WriteSparseFiles, kopia copies through a buffer of one filesystem block and makes a system
// call (a write or a seek) per 4 KiB block, and compares each block with zero byte by byte:
// 17 % of the CPU of a restore of 1 MiB files. writeRestoredFile keeps kopia's result (runs of zero
// blocks left as holes, then owner, mode and times, permission errors on the owner ignored)
// with one pwrite per run of data up to writeBufferBytes.

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

// writeRestoredFile writes the file f of the snapshot to path (replacing a file there), and sets its
// owner (where the process may), mode and modification time. It fails when the object holds
// another number of bytes than the snapshot's entry says.
func writeRestoredFile(ctx context.Context, path string, f fs.File, progress restore.FileWriteProgress) (err error) {
	r, err := f.Open(ctx)
	if err != nil {
		return fmt.Errorf("open %q in the snapshot: %w", f.Name(), err)
	}
	defer r.Close() //nolint:errcheck // read only
	out, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err //nolint:wrapcheck // names the path
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	// the file's length first: runs of zeros are then holes that need no write
	if err := out.Truncate(f.Size()); err != nil {
		return err //nolint:wrapcheck // names the path
	}
	n, err := copySparse(out, r, progress)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if n != f.Size() {
		return fmt.Errorf("write %s: the snapshot's object holds %d bytes, its entry says %d", path, n, f.Size())
	}
	if err := setOwnerAndMode(out, f); err != nil {
		return err
	}
	return os.Chtimes(path, f.ModTime(), f.ModTime()) //nolint:wrapcheck // names the path
}

// copySparse writes what r holds to out from offset 0, skipping the blocks of zeros (out was
// truncated to its length, so they read as zeros).
func copySparse(out *os.File, r io.Reader, progress restore.FileWriteProgress) (int64, error) {
	bp := writeBuffers.Get().(*[]byte) //nolint:forcetypeassert // the pool's own
	defer writeBuffers.Put(bp)
	buf := *bp
	var off int64
	for {
		n, rerr := io.ReadFull(r, buf)
		if err := writeRuns(out, buf[:n], off); err != nil {
			return off, err
		}
		off += int64(n)
		if n > 0 && progress != nil {
			progress(int64(n))
		}
		switch {
		case errors.Is(rerr, io.EOF), errors.Is(rerr, io.ErrUnexpectedEOF):
			return off, nil
		case rerr != nil:
			return off, rerr //nolint:wrapcheck // kopia's read error names the object
		}
	}
}

// writeRuns writes the runs of non-zero blocks of data, which starts at off in the file.
func writeRuns(out *os.File, data []byte, off int64) error {
	start := -1 // start of the current run of data
	for i := 0; i < len(data); i += holeBlockBytes {
		block := data[i:min(i+holeBlockBytes, len(data))]
		zero := bytes.Equal(block, zeroBlock[:len(block)])
		switch {
		case !zero && start < 0:
			start = i
		case zero && start >= 0:
			if _, err := out.WriteAt(data[start:i], off+int64(start)); err != nil {
				return err //nolint:wrapcheck // names the path
			}
			start = -1
		}
	}
	if start >= 0 {
		if _, err := out.WriteAt(data[start:], off+int64(start)); err != nil {
			return err //nolint:wrapcheck // names the path
		}
	}
	return nil
}

// setOwnerAndMode gives out the owner of e where the process may (kopia's restore ignores a
// refusal too, with IgnorePermissionErrors), then its mode (after the owner: chown clears the
// setuid bit).
func setOwnerAndMode(out *os.File, e fs.Entry) error {
	want := e.Owner()
	if st, err := out.Stat(); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && (sys.Uid != want.UserID || sys.Gid != want.GroupID) {
			if err := out.Chown(int(want.UserID), int(want.GroupID)); err != nil && !os.IsPermission(err) {
				return err //nolint:wrapcheck // names the path
			}
		}
	}
	return out.Chmod(e.Mode() & fs.ModBits) //nolint:wrapcheck // names the path
}
