package archive

// Linux's lseek whence values for finding data and holes (macOS swaps them).
const (
	seekData     = 3
	seekHole     = 4
	canSeekHoles = true
)
