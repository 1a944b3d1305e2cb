// Package statmode converts the mode of a stat(2) result to an fs.FileMode, as the os package
// does for os.Lstat. The movers stat files themselves (fstatat relative to an open directory, a
// bare descriptor's fstat) and must report the modes os.Lstat would.
package statmode

import (
	"io/fs"
	"syscall"
)

// FileMode is os.Lstat's FileMode of the stat mode m: the permission bits, the file type, and
// the setuid, setgid and sticky bits.
func FileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & syscall.S_IFMT {
	case syscall.S_IFBLK:
		mode |= fs.ModeDevice
	case syscall.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFDIR:
		mode |= fs.ModeDir
	case syscall.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case syscall.S_IFLNK:
		mode |= fs.ModeSymlink
	case syscall.S_IFSOCK:
		mode |= fs.ModeSocket
	}
	if m&syscall.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&syscall.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&syscall.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// Unix is the inverse of FileMode for the bits chmod(2) takes: the permission bits of m and its
// setuid, setgid and sticky bits, where Go keeps them apart (fs.ModeSetuid is not 0o4000).
func Unix(m fs.FileMode) uint32 {
	mode := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= syscall.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		mode |= syscall.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		mode |= syscall.S_ISVTX
	}
	return mode
}
