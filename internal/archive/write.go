// Package archive is the backup format: a PAX tar of a directory tree compressed with zstd,
// streamed to or from any io.Writer / io.Reader with bounded memory, plus the JSON manifest that
// describes one archive. It knows nothing about S3.
package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
)

// Stats describes an archive: what it holds and the bytes of its compressed stream.
type Stats struct {
	Files, Dirs, Symlinks, HardLinks int64
	// Skipped counts sockets, devices and FIFOs, which a backup cannot meaningfully hold.
	Skipped int64
	// Changed counts files whose size changed while they were read (their archived content is
	// cut or zero-padded to the size seen first, so the stream stays valid).
	Changed int64
	// ContentBytes is the sum of the regular files' sizes.
	ContentBytes int64
	// ArchiveBytes and SHA256 describe the compressed stream.
	ArchiveBytes int64
	SHA256       string
}

// WriteOptions tune Write.
type WriteOptions struct{}

// encoderOptions bound the compressor's memory: one goroutine and an 8 MiB window, so Write needs
// a few tens of MiB whatever the volume size.
var encoderOptions = []zstd.EOption{
	zstd.WithEncoderConcurrency(1),
	zstd.WithWindowSize(8 << 20),
	zstd.WithEncoderLevel(zstd.SpeedDefault),
}

type inode struct{ dev, ino uint64 }

// Write archives the tree under root into w: entries in lexical order (so the same tree gives
// the same bytes), directories (empty ones too), regular files, symlinks (never followed) and
// hard links, with modes (setuid/setgid/sticky included), numeric owners and nanosecond mtimes.
func Write(ctx context.Context, root string, w io.Writer, _ WriteOptions) (Stats, error) {
	var st Stats
	if fi, err := os.Stat(root); err != nil {
		return st, err
	} else if !fi.IsDir() {
		return st, fmt.Errorf("%s is not a directory", root)
	}
	hw := newHashingWriter(w)
	enc, err := zstd.NewWriter(hw, encoderOptions...)
	if err != nil {
		return st, err
	}
	tw := tar.NewWriter(enc)
	seen := map[inode]string{}
	walkErr := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return writeEntry(ctx, tw, path, filepath.ToSlash(rel), info, seen, &st)
	})
	if walkErr != nil {
		enc.Close()
		return st, walkErr
	}
	if err := tw.Close(); err != nil {
		return st, err
	}
	if err := enc.Close(); err != nil {
		return st, err
	}
	st.ArchiveBytes, st.SHA256 = hw.n, hw.sum()
	return st, nil
}

func writeEntry(ctx context.Context, tw *tar.Writer, path, rel string, info fs.FileInfo, seen map[inode]string, st *Stats) error {
	mode := info.Mode()
	var link string
	switch {
	case mode&(fs.ModeSocket|fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe) != 0:
		st.Skipped++
		return nil
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		link = target
	}
	hdr, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	hdr.Format = tar.FormatPAX
	hdr.Name = rel
	// Owners by number only, and no access/change times: they differ between machines and
	// between two reads of the same tree, and would make archives of one tree differ.
	hdr.Uname, hdr.Gname = "", ""
	hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
	hdr.ModTime = info.ModTime()

	switch {
	case info.IsDir():
		hdr.Name += "/"
		st.Dirs++
		return tw.WriteHeader(hdr)
	case link != "":
		st.Symlinks++
		return tw.WriteHeader(hdr)
	}
	if sys, ok := info.Sys().(*syscall.Stat_t); ok && sys.Nlink > 1 {
		key := inode{uint64(sys.Dev), sys.Ino}
		if first, ok := seen[key]; ok {
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			st.HardLinks++
			return tw.WriteHeader(hdr)
		}
		seen[key] = rel
	}
	st.Files++
	st.ContentBytes += hdr.Size
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	return copyContent(ctx, tw, path, hdr.Size, st)
}

// copyContent writes exactly size bytes of the file: a file that shrank is zero-padded and one
// that grew is cut, so the tar stream stays valid; both are counted as Changed.
func copyContent(ctx context.Context, tw io.Writer, path string, size int64, st *Stats) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.CopyN(tw, ctxReader{ctx, f}, size)
	if errors.Is(err, io.EOF) {
		st.Changed++
		_, err = io.CopyN(tw, zeros{}, size-n)
		return err
	}
	if err != nil {
		return err
	}
	if m, _ := f.Read(make([]byte, 1)); m > 0 {
		st.Changed++
	}
	return nil
}

// ctxReader stops a long copy when the context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
