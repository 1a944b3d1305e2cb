package run

import (
	"os"
	"runtime/debug"
	"strconv"

	"github.com/okgoes/okgoes-operator/internal/mover"
)

// memoryLimitShare is the part of the container's limit the Go heap may grow to before the
// garbage collector works harder: the rest is for kopia's mmap-ed index files, stacks and the
// kernel's accounting of page cache.
const memoryLimitShare = 0.75

// SetMemoryLimit sets the Go runtime's soft memory limit from mover.EnvMemoryLimit, unless GOMEMLIMIT
// already sets it. Without it the heap of a kopia backup grows to twice its live size before a
// collection (GOGC=100), and a mover with a memory limit is OOM-killed where it only had to
// collect more often. It returns the limit it set, or 0.
func SetMemoryLimit(getenv func(string) string) int64 {
	if getenv("GOMEMLIMIT") != "" {
		return 0
	}
	n, err := strconv.ParseInt(getenv(mover.EnvMemoryLimit), 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	limit := int64(float64(n) * memoryLimitShare)
	debug.SetMemoryLimit(limit)
	return limit
}

// gcPercent is the mover's GOGC: the heap may grow to 1.5 × its live size between collections,
// not 2 ×. A mover is a batch process whose peak memory is what its Job must be given; measured
// on the 200,000-file tree (docs/benchmarks.md), it lowered the peak RSS of a first kopia backup
// from 295–309 to 236 MiB for about 10 % more CPU.
const gcPercent = 50

// SetGCPercent sets the garbage collector's target to gcPercent, unless GOGC sets it. It returns
// the percentage it set, or 0.
func SetGCPercent(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		return 0
	}
	debug.SetGCPercent(gcPercent)
	return gcPercent
}

// UseTempDir points the process's TMPDIR at a directory under dir (kopia's cache volume): the
// mover's root filesystem is read-only and has no /tmp. For the mover's main only.
func UseTempDir(dir string) {
	if dir == "" {
		return
	}
	tmp := dir + "/tmp"
	if err := os.MkdirAll(tmp, 0o700); err == nil {
		os.Setenv("TMPDIR", tmp)
	}
}
