package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
)

// ReadOptions tune Read.
type ReadOptions struct {
	// Chown restores numeric owners (needs CAP_CHOWN; without it Read fails unless
	// IgnoreChownErrors is set).
	Chown             bool
	IgnoreChownErrors bool
}

// sparseBlock is the unit of hole detection on restore: all-zero blocks are skipped with a seek,
// so sparse files (VM images, databases) come back sparse.
const sparseBlock = 64 << 10

// Read extracts an archive written by Write into dest, an existing directory, and returns the
// Stats of what it read (SHA256 and ArchiveBytes of the whole compressed stream). It refuses
// entries that would land outside dest: absolute names, "..", hard links out of dest, and writes
// through a symlink extracted earlier.
func Read(ctx context.Context, r io.Reader, dest string, opts ReadOptions) (Stats, error) {
	var st Stats
	hr := newHashingReader(r)
	dec, err := zstd.NewReader(hr, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(64<<20))
	if err != nil {
		return st, err
	}
	defer dec.Close()
	ex := &extractor{dest: dest, opts: opts}
	tr := tar.NewReader(dec)
	for {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("read archive: %w", err)
		}
		if err := ex.extract(ctx, tr, hdr, &st); err != nil {
			return st, err
		}
	}
	// Consume the rest of the stream (tar padding, the zstd frame end) so the hash covers it all.
	if _, err := io.Copy(io.Discard, dec); err != nil {
		return st, fmt.Errorf("read archive: %w", err)
	}
	if _, err := io.Copy(io.Discard, hr); err != nil {
		return st, err
	}
	if err := ex.finishDirs(); err != nil {
		return st, err
	}
	st.ArchiveBytes, st.SHA256 = hr.n, hr.sum()
	return st, nil
}

type dirMeta struct {
	path     string
	mode     fs.FileMode
	mtime    time.Time
	uid, gid int
}

type extractor struct {
	dest string
	opts ReadOptions
	dirs []dirMeta
}

// target resolves an entry name inside dest, refusing anything that would escape it.
func (ex *extractor) target(name string) (string, error) {
	clean := filepath.Clean(filepath.FromSlash(name))
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("archive entry %q points outside the destination", name)
	}
	// No component below dest may be a symlink: a crafted archive could otherwise write through
	// a link it planted earlier (e.g. "a" -> /etc, then "a/passwd").
	parts := strings.Split(clean, string(filepath.Separator))
	p := ex.dest
	for _, part := range parts[:len(parts)-1] {
		p = filepath.Join(p, part)
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("archive entry %q would be written through the symlink %s", name, p)
		}
	}
	return filepath.Join(ex.dest, clean), nil
}

func (ex *extractor) extract(ctx context.Context, tr io.Reader, hdr *tar.Header, st *Stats) error {
	path, err := ex.target(hdr.Name)
	if err != nil {
		return err
	}
	mode := hdr.FileInfo().Mode()
	if hdr.Typeflag != tar.TypeDir {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("replace %s: %w", hdr.Name, err)
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		st.Dirs++
		if err := os.MkdirAll(path, 0o700); err != nil {
			return err
		}
		// Modes and times of directories are set last: writing their content would change them.
		ex.dirs = append(ex.dirs, dirMeta{path, mode, hdr.ModTime, hdr.Uid, hdr.Gid})
		return nil
	case tar.TypeReg:
		st.Files++
		st.ContentBytes += hdr.Size
		if err := writeSparse(ctx, path, tr, hdr.Size); err != nil {
			return fmt.Errorf("restore %s: %w", hdr.Name, err)
		}
	case tar.TypeSymlink:
		st.Symlinks++
		if err := os.Symlink(hdr.Linkname, path); err != nil {
			return err
		}
		return ex.chown(path, hdr, true)
	case tar.TypeLink:
		st.HardLinks++
		target, err := ex.target(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hard link %q: %w", hdr.Name, err)
		}
		return os.Link(target, path)
	default:
		return fmt.Errorf("archive entry %q has unsupported type %q", hdr.Name, hdr.Typeflag)
	}
	if err := ex.chown(path, hdr, false); err != nil {
		return err
	}
	if err := os.Chmod(path, mode); err != nil {
		return err
	}
	return os.Chtimes(path, hdr.ModTime, hdr.ModTime)
}

func (ex *extractor) chown(path string, hdr *tar.Header, link bool) error {
	if !ex.opts.Chown {
		return nil
	}
	err := os.Lchown(path, hdr.Uid, hdr.Gid)
	if err != nil && ex.opts.IgnoreChownErrors {
		return nil
	}
	return err
}

func (ex *extractor) finishDirs() error {
	for i := len(ex.dirs) - 1; i >= 0; i-- { // children before parents
		d := ex.dirs[i]
		if ex.opts.Chown {
			if err := os.Lchown(d.path, d.uid, d.gid); err != nil && !ex.opts.IgnoreChownErrors {
				return err
			}
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
		if err := os.Chtimes(d.path, d.mtime, d.mtime); err != nil {
			return err
		}
	}
	return nil
}

// writeSparse writes size bytes from r to a new file, seeking over all-zero blocks.
func writeSparse(ctx context.Context, path string, r io.Reader, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscallNoFollow, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, sparseBlock)
	var done int64
	for done < size {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), size-done)])
		if err != nil {
			return err
		}
		if isZero(buf[:n]) {
			if _, err := f.Seek(int64(n), io.SeekCurrent); err != nil {
				return err
			}
		} else if _, err := f.Write(buf[:n]); err != nil {
			return err
		}
		done += int64(n)
	}
	if err := f.Truncate(size); err != nil { // a trailing hole
		return err
	}
	return f.Close()
}

var zeroBlock = make([]byte, sparseBlock)

func isZero(b []byte) bool { return bytes.Equal(b, zeroBlock[:len(b)]) }
