package archive

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"math"
	"syscall"
)

// copyBuffer is the read size for file content: large enough to amortise system calls, small
// enough that cancellation is noticed quickly.
const copyBuffer = 256 << 10

// copyContent writes exactly fi.Size() bytes of f to w, since that is what the entry's header
// announced: a file that shrank meanwhile is zero-padded and one that grew is cut. It reports
// whether the file changed while it was read: its size or its mtime.
func copyContent(ctx context.Context, w io.Writer, fd int, p string, fi fs.FileInfo, buf []byte) (changed bool, err error) {
	size := fi.Size()
	src := &fileContent{fd: fd, holes: hasHoles(fi)}
	var done int64
	for done < size {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		n, err := src.readAt(buf[:min(int64(len(buf)), size-done)], done)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return false, err
			}
			done += int64(n)
		}
		if errors.Is(err, io.EOF) && done < size {
			changed = true
			if err := writeZeros(ctx, w, size-done, buf); err != nil {
				return false, err
			}
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return false, err
		}
	}
	if !changed { // a file that grew, or was rewritten in place, shows in its inode
		after, err := fstat(fd, p)
		if err != nil {
			return false, err
		}
		changed = after.Size() != size || !after.ModTime().Equal(fi.ModTime())
	}
	return changed, nil
}

func writeZeros(ctx context.Context, w io.Writer, n int64, buf []byte) error {
	clear(buf)
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		m := min(int64(len(buf)), n)
		if _, err := w.Write(buf[:m]); err != nil {
			return err
		}
		n -= m
	}
	return nil
}

// hasHoles reports whether fewer blocks are allocated than the size needs: only then is it
// worth asking the file system where the data is.
func hasHoles(fi fs.FileInfo) bool {
	sys, ok := fi.Sys().(*syscall.Stat_t)
	return ok && canSeekHoles && sys.Blocks*512 < fi.Size()
}

// fileContent reads a file sequentially, answering its holes with zeros instead of reading
// them: a thin VM disk can be mostly hole, and reading a hole costs the kernel about as much
// as reading data. The stream is the same either way.
type fileContent struct {
	fd    int
	holes bool
	// [data, end) is the data region at or after the last offset asked for.
	data, end int64
}

func (c *fileContent) readAt(p []byte, off int64) (int, error) {
	if c.holes && off >= c.end {
		if err := c.findData(off); err != nil {
			c.holes = false // the file system cannot tell: read everything
		}
	}
	if !c.holes {
		return c.pread(p, off)
	}
	if off < c.data {
		n := min(int64(len(p)), c.data-off)
		clear(p[:n])
		return int(n), nil
	}
	return c.pread(p[:min(int64(len(p)), c.end-off)], off)
}

// pread reads len(p) bytes at off, or up to the end of the file (then with io.EOF).
func (c *fileContent) pread(p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		n, err := syscall.Pread(c.fd, p[done:], off+int64(done))
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return done, err
		case n == 0:
			return done, io.EOF
		}
		done += n
	}
	return done, nil
}

func (c *fileContent) findData(off int64) error {
	data, err := syscall.Seek(c.fd, off, seekData)
	if errors.Is(err, syscall.ENXIO) { // only hole up to the end (or the file shrank)
		c.data, c.end = math.MaxInt64, math.MaxInt64
		return nil
	}
	if err != nil {
		return err
	}
	end, err := syscall.Seek(c.fd, data, seekHole)
	if err != nil {
		return err
	}
	c.data, c.end = data, end
	return nil
}
