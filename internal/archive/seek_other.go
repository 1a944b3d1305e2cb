//go:build !linux

package archive

import (
	"syscall"
	"time"
)

// Elsewhere, holes are read like data.
const (
	seekData     = 0
	seekHole     = 0
	canSeekHoles = false
)

func mtime(st *syscall.Stat_t) time.Time { return time.Unix(st.Mtimespec.Unix()) }

// oNoatime is open(2)'s O_NOATIME where it exists.
const oNoatime = 0
