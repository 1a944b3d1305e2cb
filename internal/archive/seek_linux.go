package archive

import (
	"syscall"
	"time"
)

// Linux's lseek whence values for finding data and holes (macOS swaps them).
const (
	seekData     = 3
	seekHole     = 4
	canSeekHoles = true
)

func mtime(st *syscall.Stat_t) time.Time { return time.Unix(st.Mtim.Unix()) }

// oNoatime is open(2)'s O_NOATIME where it exists.
const oNoatime = syscall.O_NOATIME
