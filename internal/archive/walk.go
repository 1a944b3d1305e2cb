package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// fileID identifies an inode, to find the other names of a hard-linked file.
type fileID struct{ dev, ino uint64 }

// walker writes the entries of one tree; its state is what must outlive a single entry.
type walker struct {
	ctx context.Context
	tw  *tar.Writer
	st  *Stats
	// links maps each inode seen with more than one name to the first name archived.
	links map[fileID]string
	buf   []byte
	// noatime: open files with O_NOATIME (see openFile).
	noatime bool
	// top, when set, receives the root's entries with their totals (WriteOptions.Top).
	top *[]TreeEntry
}

// dir writes a directory, then its children in lexical order.
func (wk *walker) dir(p, name string, fi fs.FileInfo) error {
	// List before writing the header, so a directory that vanished is left out whole.
	children, err := readDir(p)
	if err != nil {
		if name != "." && errors.Is(err, fs.ErrNotExist) {
			wk.st.Changed++
			return nil
		}
		return err
	}
	h := header(name+"/", fi)
	h.Typeflag = tar.TypeDir
	if err := wk.tw.WriteHeader(h); err != nil {
		return err
	}
	wk.st.Dirs++
	for _, c := range children {
		child := c.Name()
		if name != "." {
			child = path.Join(name, child)
		}
		before := *wk.st
		if err := wk.entry(filepath.Join(p, c.Name()), child, c.Type()); err != nil {
			return err
		}
		if name == "." && wk.top != nil {
			*wk.top = appendTop(*wk.top, child, before, *wk.st)
		}
	}
	return nil
}

// appendTop adds the root's entry name to top, with what writing it added to the stats (before
// and after): nothing when it vanished or was skipped before it was written.
func appendTop(top []TreeEntry, name string, before, after Stats) []TreeEntry {
	e := TreeEntry{Path: name, Files: after.Files - before.Files, Bytes: after.ContentBytes - before.ContentBytes}
	switch {
	case after.Dirs > before.Dirs:
		e.Type = "dir"
	case after.Files > before.Files || after.HardLinks > before.HardLinks:
		e.Type = "file"
	case after.Symlinks > before.Symlinks:
		e.Type = "symlink"
	case after.FIFOs > before.FIFOs:
		e.Type = "other"
	default:
		return top // vanished, or a socket or device (not in the archive)
	}
	return append(top, e)
}

// readDir lists a directory with the type of each entry, which the file system returns with
// the names: regular files, most of a volume, then need no lstat of their own.
func readDir(p string) ([]fs.DirEntry, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

// entry writes whatever p is now; name is its slash-separated path inside the archive and typ
// the type its directory listed.
func (wk *walker) entry(p, name string, typ fs.FileMode) error {
	if err := wk.ctx.Err(); err != nil {
		return err
	}
	if typ.IsRegular() {
		return wk.file(p, name)
	}
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) { // deleted since its directory was listed
		wk.st.Changed++
		return nil
	}
	if err != nil {
		return err
	}
	switch mode := fi.Mode(); {
	case mode.IsDir():
		return wk.dir(p, name, fi)
	case mode.IsRegular():
		return wk.file(p, name)
	case mode&fs.ModeSymlink != 0:
		return wk.symlink(p, name, fi)
	case mode&fs.ModeNamedPipe != 0:
		h := header(name, fi)
		h.Typeflag = tar.TypeFifo
		wk.st.FIFOs++
		return wk.tw.WriteHeader(h)
	default: // socket, device
		wk.st.Skipped++
		return nil
	}
}

func (wk *walker) symlink(p, name string, fi fs.FileInfo) error {
	target, err := os.Readlink(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EINVAL) { // gone, or no longer a link
		wk.st.Changed++
		return nil
	}
	if err != nil {
		return err
	}
	h := header(name, fi)
	h.Typeflag, h.Linkname = tar.TypeSymlink, target
	wk.st.Symlinks++
	return wk.tw.WriteHeader(h)
}

func (wk *walker) file(p, name string) error {
	// O_NOFOLLOW and O_NONBLOCK: the name may have become a symlink or a FIFO since it was
	// listed, and opening a FIFO would block the backup forever. A bare descriptor: an os.File
	// would try, and fail, to register a regular file with the network poller.
	fd, err := openFile(p, &wk.noatime)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ELOOP) {
		wk.st.Changed++
		return nil
	}
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	// Describe the inode actually opened.
	fi, err := fstat(fd, p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		wk.st.Changed++
		return nil
	}
	id, linked := hardLinkID(fi)
	if first, ok := wk.links[id]; linked && ok {
		h := header(name, fi)
		h.Typeflag, h.Linkname = tar.TypeLink, first
		wk.st.HardLinks++
		return wk.tw.WriteHeader(h)
	}
	if linked {
		wk.links[id] = name
	}
	h := header(name, fi)
	h.Typeflag, h.Size = tar.TypeReg, fi.Size()
	if err := wk.tw.WriteHeader(h); err != nil {
		return err
	}
	wk.st.Files++
	wk.st.ContentBytes += h.Size
	if testHookAfterHeader != nil {
		testHookAfterHeader(p)
	}
	changed, err := copyContent(wk.ctx, wk.tw, fd, p, fi, wk.buf)
	if err != nil {
		return fmt.Errorf("archive %s: %w", p, err)
	}
	if changed {
		wk.st.Changed++
	}
	return nil
}

// testHookAfterHeader lets tests change a file between its header and its content: the race
// that Stats.Changed is about, which a test cannot otherwise hit on purpose.
var testHookAfterHeader func(path string)

// hardLinkID reports the inode of a file that has other names.
func hardLinkID(fi fs.FileInfo) (fileID, bool) {
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || sys.Nlink < 2 {
		return fileID{}, false
	}
	return fileID{uint64(sys.Dev), uint64(sys.Ino)}, true
}

// header starts the entry for fi. It sets only what the restore needs and what stays the same
// between two reads of an unchanged tree, so archives are reproducible: no user or group names
// (they depend on the machine's user database), no access or change times.
func header(name string, fi fs.FileInfo) *tar.Header {
	h := &tar.Header{
		Name:    name,
		Mode:    tarMode(fi.Mode()),
		ModTime: fi.ModTime(),
		// PAX keeps nanosecond mtimes, long names and large sizes and ids.
		Format: tar.FormatPAX,
	}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		h.Uid, h.Gid = int(sys.Uid), int(sys.Gid)
	}
	return h
}

// tarMode converts Go's mode bits to the Unix ones a tar header holds.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
