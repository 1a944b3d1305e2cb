package kopiarepo

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/fs/localfs"
	"golang.org/x/sys/unix"

	"github.com/okgoes/okgoes-operator/internal/statmode"
)

// A backup reads the volume through the entries of this file rather than kopia's localfs, for
// two reasons measured on the second backup of 200,000 files of 4 KiB (docs/benchmarks.md):
//
//   - localfs lstats each entry by its full path; these entries fstatat it relative to the open
//     directory, which resolves one name instead of the whole path.
//   - The mover lists the volume ahead (ReadAhead) while it opens the repository: deriving the
//     key is single-threaded, and takes the first 0.3–0.5 s of every run, while the other core
//     waits. The upload then takes the directories listed ahead from memory.
//
// The entries are what localfs makes of the same files, field for field (name, mode, size,
// modification time, owner, device, path; a directory's size is 0; sockets, FIFOs and devices
// are kopia's "unknown or unsupported" error entries, which the upload skips; kopia's shallow
// placeholders are left to localfs): a snapshot taken through them matches one taken through
// localfs, and the next backup finds every unchanged file cached
// (TestLocalTreeIsLocalfs, TestLocalfsSnapshotIsThePrevious).

// readAheadEntries bounds the entries ReadAhead holds: about 100 bytes each, 25 MiB at most. A
// directory with more entries than are left is not listed at all. A variable for tests.
var readAheadEntries = 1 << 18

// direntBufferBytes is the buffer a directory is read with (getdents64).
const direntBufferBytes = 32 << 10

// Listing is a volume listed ahead of its backup: the directories listed while the repository
// was opened, each complete, until Stop (or readAheadEntries). A nil Listing lists nothing.
// The backup takes each directory from it once (on a first backup, kopia's scan for the
// progress estimate, which runs ahead of the upload, mostly does).
type Listing struct {
	stopped atomic.Bool
	done    chan struct{}
	mu      sync.Mutex
	dirs    map[string]listedDir // by the directory's path
	// special holds the paths of the entries the backup met that a snapshot cannot hold
	// (FIFOs, sockets, devices): kopia's upload leaves them out without a word, and the backup
	// reports how many (SnapshotInfo.Skipped). A set: a first backup's estimate scan meets
	// them too.
	special sync.Map
}

// emptyListing is a Listing that holds nothing, for a backup made without ReadAhead.
func emptyListing() *Listing {
	l := &Listing{done: make(chan struct{}), dirs: map[string]listedDir{}}
	l.stopped.Store(true)
	close(l.done)
	return l
}

// skipped counts the entries a snapshot could not hold that the backup met.
func (l *Listing) skipped() int {
	n := 0
	l.special.Range(func(any, any) bool { n++; return true })
	return n
}

// listedDir is a directory's entries, and its times from before they were read: a directory
// whose modification or change time differs from them has had entries added, removed or
// renamed since, and is read again.
type listedDir struct {
	entries      []fs.Entry
	mtime, ctime unix.Timespec
}

// ReadAhead starts listing the tree under dir, depth first, in the order a backup reads it.
// Stop it when the backup starts reading (Backup does), or when the backup is not made.
func ReadAhead(dir string) *Listing {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil
	}
	l := &Listing{done: make(chan struct{}), dirs: map[string]listedDir{}}
	go func() {
		defer close(l.done)
		budget := readAheadEntries
		l.list(root, &budget)
	}()
	return l
}

// list lists the directory at path and then, depth first, its subdirectories, until stopped
// or out of budget. A directory that cannot be read is left to the backup, which reports it.
func (l *Listing) list(path string, budget *int) {
	if l.stopped.Load() || *budget <= 0 {
		return
	}
	dir, err := readDir(path, l, *budget)
	if err != nil || l.stopped.Load() {
		return
	}
	*budget -= len(dir.entries)
	l.mu.Lock()
	l.dirs[path] = dir
	l.mu.Unlock()
	for _, e := range dir.entries {
		if d, ok := e.(*localDir); ok {
			l.list(d.LocalFilesystemPath(), budget)
		}
	}
}

// Stop ends the listing at its next entry; it does not wait for it (a listing stuck in a system
// call on a hung volume must not hold the backup, which then meets the same hang itself, under
// the Job's deadline). What was listed stays available.
func (l *Listing) Stop() {
	if l != nil {
		l.stopped.Store(true)
	}
}

// take returns the listed entries of the directory at path, if it was listed and has not
// changed since, and forgets them: a listing is read once (a directory read again, which
// kopia's upload does not do, is read from the volume), and its memory goes with it.
func (l *Listing) take(path string) ([]fs.Entry, bool) {
	if l == nil {
		return nil, false
	}
	l.mu.Lock()
	d, ok := l.dirs[path]
	delete(l.dirs, path)
	l.mu.Unlock()
	if !ok {
		return nil, false
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil || st.Mtim != d.mtime || st.Ctim != d.ctime {
		return nil, false
	}
	return d.entries, true
}

// localDirectory is the directory at path, for a backup: read from listing where it was
// listed, from the filesystem otherwise. A symlink at path is taken as the directory it
// points to, as localfs.Directory does.
func localDirectory(path string, listing *Listing) (fs.Directory, error) {
	path = filepath.Clean(path)
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return nil, &iofs.PathError{Op: "lstat", Path: path, Err: err}
	}
	i := strings.LastIndexByte(path, filepath.Separator) // as localfs splits it
	name, prefix := path[i+1:], path[:i+1]
	if path == "/" {
		name, prefix = "/", ""
	}
	e := newLocalEntry(name, prefix, &st)
	if !e.mode.IsDir() && e.mode&os.ModeSymlink == 0 {
		return nil, fmt.Errorf("not a directory: %v", path)
	}
	return &localDir{localEntry: e, listing: listing}, nil
}

// localEntry holds what localfs's entries hold.
type localEntry struct {
	name       string
	prefix     string // the parent's path and a separator
	size       int64
	mtimeNanos int64
	mode       os.FileMode
	owner      fs.OwnerInfo
	device     fs.DeviceInfo
}

func newLocalEntry(name, prefix string, st *unix.Stat_t) localEntry {
	return localEntry{
		name:       name,
		prefix:     prefix,
		size:       st.Size,
		mtimeNanos: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UnixNano(),
		mode:       statmode.FileMode(st.Mode),
		owner:      fs.OwnerInfo{UserID: st.Uid, GroupID: st.Gid},
		device:     fs.DeviceInfo{Dev: st.Dev, Rdev: st.Rdev},
	}
}

func (e *localEntry) Name() string                { return e.name }
func (e *localEntry) IsDir() bool                 { return e.mode.IsDir() }
func (e *localEntry) Mode() os.FileMode           { return e.mode }
func (e *localEntry) Size() int64                 { return e.size }
func (e *localEntry) ModTime() time.Time          { return time.Unix(0, e.mtimeNanos) }
func (e *localEntry) Sys() any                    { return nil }
func (e *localEntry) Owner() fs.OwnerInfo         { return e.owner }
func (e *localEntry) Device() fs.DeviceInfo       { return e.device }
func (e *localEntry) LocalFilesystemPath() string { return e.prefix + e.name }
func (e *localEntry) Close()                      {}

// childEntry is the entry of name, in the directory at prefix, of stat st.
func childEntry(name, prefix string, st *unix.Stat_t, listing *Listing) (fs.Entry, error) {
	if strings.HasSuffix(name, localfs.ShallowEntrySuffix) {
		return localfs.NewEntry(prefix + name) //nolint:wrapcheck // kopia's placeholders, kopia's errors
	}
	e := newLocalEntry(name, prefix, st)
	switch e.mode & os.ModeType {
	case os.ModeDir:
		return &localDir{localEntry: e, listing: listing}, nil
	case os.ModeSymlink:
		return &localSymlink{e}, nil
	case 0:
		return &localFile{e}, nil
	default:
		return &localErrorEntry{localEntry: e, err: fs.ErrUnknown, listing: listing}, nil
	}
}

// errOverBudget ends the listing of a directory with more entries than the listing may hold.
var errOverBudget = errors.New("more entries than the listing may hold")

// readDir lists the directory at path for l, up to limit entries (more is errOverBudget); it
// stops early (with what it read) when l is stopped. Entries that vanish while it reads are
// left out, as localfs does.
func readDir(path string, l *Listing, limit int) (listedDir, error) {
	it, err := openDirIterator(path, l)
	if err != nil {
		return listedDir{}, err
	}
	defer it.Close()
	var st unix.Stat_t
	if err := unix.Fstat(it.fd, &st); err != nil {
		return listedDir{}, &iofs.PathError{Op: "fstat", Path: path, Err: err}
	}
	d := listedDir{mtime: st.Mtim, ctime: st.Ctim}
	for !l.stopped.Load() {
		e, err := it.Next(context.Background())
		if err != nil {
			return listedDir{}, err
		}
		if e == nil {
			break
		}
		if len(d.entries) == limit {
			return listedDir{}, errOverBudget
		}
		d.entries = append(d.entries, e)
	}
	return d, nil
}

type localDir struct {
	localEntry
	listing *Listing
}

func (d *localDir) Size() int64                      { return 0 }
func (d *localDir) SupportsMultipleIterations() bool { return true }

func (d *localDir) Child(_ context.Context, name string) (fs.Entry, error) {
	prefix := d.LocalFilesystemPath() + string(filepath.Separator)
	var st unix.Stat_t
	if err := unix.Lstat(prefix+name, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fs.ErrEntryNotFound
		}
		return nil, &iofs.PathError{Op: "lstat", Path: prefix + name, Err: err}
	}
	return childEntry(name, prefix, &st, d.listing)
}

func (d *localDir) Iterate(_ context.Context) (fs.DirectoryIterator, error) {
	path := d.LocalFilesystemPath()
	if entries, ok := d.listing.take(path); ok {
		return &listedIterator{entries: entries}, nil
	}
	return openDirIterator(path, d.listing)
}

// listedIterator iterates the entries of a directory listed ahead.
type listedIterator struct{ entries []fs.Entry }

func (it *listedIterator) Next(context.Context) (fs.Entry, error) {
	if len(it.entries) == 0 {
		return nil, nil
	}
	e := it.entries[0]
	it.entries = it.entries[1:]
	return e, nil
}

func (it *listedIterator) Close() {}

// dirIterator reads a directory from the filesystem: its names a buffer at a time, then the
// stat of each, relative to the open directory.
type dirIterator struct {
	fd      int
	prefix  string
	listing *Listing
	buf     []byte
	names   []string
}

var direntBuffers = sync.Pool{New: func() any { b := make([]byte, direntBufferBytes); return &b }}

func openDirIterator(path string, listing *Listing) (*dirIterator, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &iofs.PathError{Op: "open", Path: path, Err: err}
	}
	bp := direntBuffers.Get().(*[]byte) //nolint:forcetypeassert // the pool's own
	return &dirIterator{fd: fd, prefix: path + string(filepath.Separator), listing: listing, buf: *bp}, nil
}

func (it *dirIterator) Next(context.Context) (fs.Entry, error) {
	for {
		if len(it.names) == 0 {
			n, err := unix.ReadDirent(it.fd, it.buf)
			for errors.Is(err, unix.EINTR) {
				n, err = unix.ReadDirent(it.fd, it.buf)
			}
			if err != nil {
				return nil, &iofs.PathError{Op: "readdirent", Path: it.prefix, Err: err}
			}
			if n == 0 {
				return nil, nil
			}
			_, _, it.names = unix.ParseDirent(it.buf[:n], -1, it.names[:0])
			continue
		}
		name := it.names[0]
		it.names = it.names[1:]
		var st unix.Stat_t
		err := unix.Fstatat(it.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		for errors.Is(err, unix.EINTR) {
			err = unix.Fstatat(it.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		}
		switch {
		case errors.Is(err, unix.ENOENT):
			continue // removed since it was listed
		case err != nil:
			return nil, &iofs.PathError{Op: "lstat", Path: it.prefix + name, Err: err}
		}
		return childEntry(name, it.prefix, &st, it.listing)
	}
}

func (it *dirIterator) Close() {
	if it.fd >= 0 {
		unix.Close(it.fd) //nolint:errcheck // read only
		it.fd = -1
		direntBuffers.Put(&it.buf)
	}
}

type localFile struct{ localEntry }

func (f *localFile) Open(context.Context) (fs.Reader, error) {
	file, err := os.Open(f.LocalFilesystemPath())
	if err != nil {
		return nil, err //nolint:wrapcheck // names the path
	}
	return &localReader{File: file, prefix: f.prefix}, nil
}

// localReader is an open file of the volume; Entry is the file as it is now.
type localReader struct {
	*os.File
	prefix string
}

func (r *localReader) Entry() (fs.Entry, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(r.Fd()), &st); err != nil {
		return nil, &iofs.PathError{Op: "fstat", Path: r.Name(), Err: err}
	}
	e := newLocalEntry(r.Name()[len(r.prefix):], r.prefix, &st)
	return &localFile{e}, nil
}

type localSymlink struct{ localEntry }

func (s *localSymlink) Readlink(context.Context) (string, error) {
	return os.Readlink(s.LocalFilesystemPath()) //nolint:wrapcheck // names the path
}

func (s *localSymlink) Resolve(context.Context) (fs.Entry, error) {
	target, err := filepath.EvalSymlinks(s.LocalFilesystemPath())
	if err != nil {
		return nil, fmt.Errorf("resolve symlink %q: %w", s.LocalFilesystemPath(), err)
	}
	return localfs.NewEntry(target) //nolint:wrapcheck // kopia's
}

type localErrorEntry struct {
	localEntry
	err     error
	listing *Listing // counts it as skipped when kopia's upload asks
}

func (e *localErrorEntry) ErrorInfo() error {
	if e.listing != nil && errors.Is(e.err, fs.ErrUnknown) {
		e.listing.special.Store(e.LocalFilesystemPath(), struct{}{})
	}
	return e.err
}

var (
	_ fs.Directory  = (*localDir)(nil)
	_ fs.File       = (*localFile)(nil)
	_ fs.Symlink    = (*localSymlink)(nil)
	_ fs.ErrorEntry = (*localErrorEntry)(nil)
	_ fs.Reader     = (*localReader)(nil)
)
