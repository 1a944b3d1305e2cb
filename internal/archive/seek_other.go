//go:build !linux

package archive

// Elsewhere, holes are read like data.
const (
	seekData     = 0
	seekHole     = 0
	canSeekHoles = false
)
