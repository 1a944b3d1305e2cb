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
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// dirMeta is what finishDirs applies to a directory once everything inside it is written.
type dirMeta struct {
	name     string // as in the archive, to check the path again and to name it in errors
	path     string
	mode     fs.FileMode
	mtime    time.Time
	uid, gid int
}

// extractor writes the entries of one archive under dest.
type extractor struct {
	ctx   context.Context
	dest  string
	opts  ReadOptions
	st    *Stats
	dirs  []dirMeta
	buf   []byte
	small *smallFiles
	// known holds directories under dest that this restore made or found to be directories,
	// all the way up: entries below them need no check of the path on the way. Whatever
	// replaces a path removes it, and everything under it, from here.
	known map[string]struct{}
	// volumeRoots are dest and ReadOptions.VolumeRoots under it (absolute): volume roots.
	volumeRoots map[string]bool
}

func (ex *extractor) extract(hdr *tar.Header, r io.Reader) error {
	if !ex.opts.Only.Has(hdr) {
		return nil // scan reads (and hashes) its content on the way to the next entry
	}
	p, err := ex.resolve(hdr.Name)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return ex.dir(hdr, p)
	case tar.TypeReg, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo:
	case tar.TypeChar, tar.TypeBlock: // Write never stores these
		ex.st.Skipped++
		return nil
	case tar.TypeXGlobalHeader: // metadata for the archive, not a file
		return nil
	default:
		return fmt.Errorf("archive entry %q: unsupported type %q", hdr.Name, hdr.Typeflag)
	}
	if p == ex.dest {
		return fmt.Errorf("archive entry %q would replace the destination directory", hdr.Name)
	}
	if err := ex.parent(p); err != nil {
		return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
	}
	if hdr.Typeflag == tar.TypeReg && hdr.Size <= smallFileMax {
		return ex.smallFile(hdr, p, r)
	}
	// Everything else is written here, after the small files in flight.
	if err := ex.small.wait(); err != nil {
		return err
	}
	// Replace, never write into, what is there: it may be a hard link to another restored file,
	// or a symlink. Creating comes first, as the path is usually free.
	create := func() error {
		switch hdr.Typeflag {
		case tar.TypeReg:
			return ex.file(hdr, p, r)
		case tar.TypeSymlink:
			return ex.symlink(hdr, p)
		case tar.TypeFifo:
			return ex.fifo(hdr, p)
		default:
			return ex.hardLink(hdr, p)
		}
	}
	err = create()
	if errors.Is(err, fs.ErrExist) {
		if err = ex.remove(p); err == nil {
			err = create()
		}
	}
	if err != nil {
		return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
	}
	return nil
}

// smallFile reads the content of a small regular file and hands it to the workers.
func (ex *extractor) smallFile(hdr *tar.Header, p string, r io.Reader) error {
	buf := ex.small.buffer()
	if _, err := io.ReadFull(r, buf[:hdr.Size]); err != nil {
		ex.small.release(buf)
		return fmt.Errorf("read archive: %w", err)
	}
	ex.st.Files++
	ex.st.ContentBytes += hdr.Size
	return ex.small.add(&smallFile{name: hdr.Name, path: p, data: buf[:hdr.Size], mode: uint32(hdr.Mode & 0o7777),
		uid: hdr.Uid, gid: hdr.Gid, mtime: hdr.ModTime})
}

// parent makes sure the directory p goes into exists; archives written by Write list every
// directory before its content, so it usually does.
func (ex *extractor) parent(p string) error {
	dir := filepath.Dir(p)
	if _, ok := ex.known[dir]; ok {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ex.known[dir] = struct{}{}
	return nil
}

// remove removes what is at p (a file or symlink, never followed; an empty directory), and
// forgets the directories it may have been.
func (ex *extractor) remove(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	below := p + string(filepath.Separator)
	for d := range ex.known {
		if d == p || strings.HasPrefix(d, below) {
			delete(ex.known, d)
		}
	}
	return nil
}

// resolve maps an entry name to its path under dest. Cleaning the name is not enough: an
// earlier entry may have planted a symlink (a -> /etc, then a/passwd), so no directory on the
// way may be a symlink. Only the last element may be one, and callers replace it rather than
// follow it.
func (ex *extractor) resolve(name string) (string, error) {
	clean := filepath.Clean(filepath.FromSlash(name))
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("archive entry %q points outside the destination", name)
	}
	if clean == "." {
		return ex.dest, nil
	}
	full := filepath.Join(ex.dest, clean)
	if _, ok := ex.known[filepath.Dir(full)]; ok {
		return full, nil
	}
	p := ex.dest
	parts := strings.Split(clean, string(filepath.Separator))
	for _, part := range parts[:len(parts)-1] {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			break // nothing below exists yet, so no link either
		}
		if err != nil {
			return "", fmt.Errorf("archive entry %q: %w", name, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("archive entry %q goes through the symlink %s", name, p)
		}
	}
	return full, nil
}

func (ex *extractor) dir(hdr *tar.Header, p string) error {
	// A small file in flight may be at p, or be what is to be replaced.
	if err := ex.small.wait(); err != nil {
		return err
	}
	// Owner-only until finishDirs: the archived mode may not let us write the content.
	err := os.Mkdir(p, 0o700)
	if errors.Is(err, fs.ErrExist) {
		fi, lerr := os.Lstat(p)
		switch {
		case lerr != nil:
			err = lerr
		case fi.IsDir(): // dest itself, or made for an earlier entry: keep it
			err = nil
		default: // a file or symlink: replace it, so nothing is created through a link
			if err = ex.remove(p); err == nil {
				err = os.Mkdir(p, 0o700)
			}
		}
	} else if errors.Is(err, fs.ErrNotExist) { // no entry for the directory above
		err = os.MkdirAll(p, 0o700)
	}
	if err != nil {
		return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
	}
	ex.known[p] = struct{}{}
	ex.st.Dirs++
	ex.dirs = append(ex.dirs, dirMeta{hdr.Name, p, hdr.FileInfo().Mode(), hdr.ModTime, hdr.Uid, hdr.Gid})
	return nil
}

func (ex *extractor) file(hdr *tar.Header, p string, r io.Reader) error {
	// O_EXCL and O_NOFOLLOW: a file must be created here, not reached through a link.
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	ex.st.Files++
	ex.st.ContentBytes += hdr.Size
	if err := writeSparse(ex.ctx, f, r, hdr.Size, ex.buf); err != nil {
		return err
	}
	if err := ex.chown(func() error { return f.Chown(hdr.Uid, hdr.Gid) }); err != nil {
		return err
	}
	// After chown, which clears setuid and setgid.
	if err := f.Chmod(hdr.FileInfo().Mode()); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chtimes(p, time.Time{}, hdr.ModTime)
}

func (ex *extractor) symlink(hdr *tar.Header, p string) error {
	if err := os.Symlink(hdr.Linkname, p); err != nil {
		return err
	}
	ex.st.Symlinks++
	if err := ex.chown(func() error { return os.Lchown(p, hdr.Uid, hdr.Gid) }); err != nil {
		return err
	}
	return setTimes(p, hdr.ModTime, unix.AT_SYMLINK_NOFOLLOW) // the link's own times, never its target's
}

// fifo makes the named pipe of hdr at p (never through a link: mkfifo fails on anything there),
// with its owner, mode and mtime.
func (ex *extractor) fifo(hdr *tar.Header, p string) error {
	if err := unix.Mkfifo(p, 0o600); err != nil {
		return &fs.PathError{Op: "mkfifo", Path: p, Err: err}
	}
	ex.st.FIFOs++
	if err := ex.chown(func() error { return os.Lchown(p, hdr.Uid, hdr.Gid) }); err != nil {
		return err
	}
	if err := os.Chmod(p, hdr.FileInfo().Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	return setTimes(p, hdr.ModTime, unix.AT_SYMLINK_NOFOLLOW)
}

// setTimes sets the access and modification times of p to mtime; flags is 0 or
// unix.AT_SYMLINK_NOFOLLOW (the times of p itself when it is a symlink).
func setTimes(p string, mtime time.Time, flags int) error {
	ts, err := unix.TimeToTimespec(mtime)
	if err != nil {
		return &fs.PathError{Op: "chtimes", Path: p, Err: err}
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, flags); err != nil {
		return &fs.PathError{Op: "chtimes", Path: p, Err: err}
	}
	return nil
}

func (ex *extractor) hardLink(hdr *tar.Header, p string) error {
	target, err := ex.resolve(hdr.Linkname)
	if err != nil {
		return err
	}
	// link(2) does not follow a symlink named as its target, so this stays inside dest.
	if err := os.Link(target, p); err != nil {
		return err
	}
	ex.st.HardLinks++
	return nil
}

func (ex *extractor) chown(do func() error) error {
	if !ex.opts.Chown {
		return nil
	}
	err := do()
	if ex.opts.IgnoreChownEPERM && errors.Is(err, syscall.EPERM) {
		return nil
	}
	return err
}

// finishDirs sets the directories' owners, modes and mtimes: only now, because creating their
// content changed their mtimes and their archived modes may forbid writing. Children come
// before parents, so a parent made read-only last cannot block its children's changes.
func (ex *extractor) finishDirs() error {
	for i := len(ex.dirs) - 1; i >= 0; i-- {
		d := ex.dirs[i]
		// A later entry may have replaced the directory, or one above it, by a symlink: never
		// change what it points at.
		if _, err := ex.resolve(d.name); err != nil {
			return err
		}
		if fi, err := os.Lstat(d.path); err != nil || !fi.IsDir() {
			return fmt.Errorf("archive entry %q: directory was replaced by a later entry", d.name)
		}
		// A group restore's destination is the directory the members' volumes are mounted in:
		// the container's (on a read-only root file system in a pod), nobody's backup.
		if d.path == ex.dest && len(ex.opts.VolumeRoots) > 0 {
			continue
		}
		// The destination itself belongs to the volume, not to the archive: a restore that does
		// not own it (a non-root mover on a volume root owned by root and the fsGroup) leaves
		// its owner, mode and mtime as they are and restores everything inside. So do the
		// members' directories of a group restore, each a volume root (VolumeRoots).
		keep := func(err error) error {
			if ex.volumeRoots[d.path] && errors.Is(err, syscall.EPERM) {
				return nil
			}
			return err
		}
		if err := ex.chown(func() error { return os.Lchown(d.path, d.uid, d.gid) }); keep(err) != nil {
			return fmt.Errorf("archive entry %q: %w", d.name, err)
		}
		if err := os.Chmod(d.path, d.mode); keep(err) != nil {
			return fmt.Errorf("archive entry %q: %w", d.name, err)
		}
		if err := os.Chtimes(d.path, time.Time{}, d.mtime); keep(err) != nil {
			return fmt.Errorf("archive entry %q: %w", d.name, err)
		}
	}
	return nil
}

// IsTargetError tells whether err from Read is the destination refusing a write (permissions, a
// read-only or full file system, a quota) rather than a damaged or hostile archive.
func IsTargetError(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EACCES, syscall.EPERM, syscall.EROFS, syscall.ENOSPC, syscall.EDQUOT} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}
