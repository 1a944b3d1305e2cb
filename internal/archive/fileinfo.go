package archive

import (
	"io/fs"
	"path/filepath"
	"syscall"
	"time"

	"github.com/okgoes/okgoes-operator/internal/statmode"
)

// openFile opens p for reading without following a final symlink or blocking on a FIFO, and,
// while *noatime holds, without updating its access time: a backup should not change what it
// reads, and on ext4 that update is an inode write per file. Only the file's owner (or
// CAP_FOWNER) may ask for that; the first refusal turns *noatime off for the rest of the walk.
func openFile(p string, noatime *bool) (int, error) {
	for {
		flags := syscall.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_CLOEXEC
		if *noatime {
			flags |= oNoatime
		}
		fd, err := syscall.Open(p, flags, 0)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EPERM && *noatime:
			*noatime = false
			continue
		case err != nil:
			return -1, &fs.PathError{Op: "open", Path: p, Err: err}
		}
		return fd, nil
	}
}

// fstat describes the open file fd, named p, as os.File.Stat would.
func fstat(fd int, p string) (fs.FileInfo, error) {
	fi := &statInfo{name: filepath.Base(p)}
	for {
		err := syscall.Fstat(fd, &fi.sys)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "stat", Path: p, Err: err}
		}
		return fi, nil
	}
}

// statInfo is the fs.FileInfo of a stat result; Sys is the *syscall.Stat_t.
type statInfo struct {
	name string
	sys  syscall.Stat_t
}

func (fi *statInfo) Name() string       { return fi.name }
func (fi *statInfo) Size() int64        { return fi.sys.Size }
func (fi *statInfo) ModTime() time.Time { return mtime(&fi.sys) }
func (fi *statInfo) IsDir() bool        { return fi.Mode().IsDir() }
func (fi *statInfo) Sys() any           { return &fi.sys }

// Mode converts the Unix mode bits as the os package does.
func (fi *statInfo) Mode() fs.FileMode { return statmode.FileMode(fi.sys.Mode) }
