package archive

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/zstd"
)

// WriteOptions tune Write.
type WriteOptions struct {
	// Top, when set, receives the top level of the tree written, in lexical order: each entry of
	// the root with the files and bytes under it (the manifest's Tree).
	Top *[]TreeEntry
}

// windowSize is the zstd window, shared by both directions: the encoder's history buffer and
// the decoder's limit are what bound their memory (see the package comment).
const windowSize = 8 << 20

// encoderOptions keep the compressor on one goroutine: a Job gets one core's worth of CPU,
// memory stays fixed, and the output does not depend on scheduling.
var encoderOptions = []zstd.EOption{
	zstd.WithEncoderConcurrency(1),
	zstd.WithWindowSize(windowSize),
	zstd.WithEncoderLevel(zstd.SpeedDefault),
	zstd.WithEncoderCRC(true), // lets Read detect a corrupted stream
}

// Write archives the tree under root into w and reports what it wrote. Entries come in
// lexical order (the same tree gives the same bytes): directories (empty ones too), regular
// files, symlinks (stored, never followed) and hard links (the second and later names of an
// inode point at the first), with their permission bits including setuid, setgid and sticky,
// numeric owners and nanosecond mtimes. Sockets, devices and FIFOs are counted in
// Stats.Skipped. Files that change while being read do not corrupt the stream (see
// Stats.Changed). Write stops between files and within large ones when ctx ends, returning
// ctx.Err().
//
// On error, what was written to w is not a complete archive and must be discarded.
func Write(ctx context.Context, root string, w io.Writer, opts WriteOptions) (Stats, error) {
	var st Stats
	// The root itself may be a symlink (a mount path): the caller named it, so follow it.
	fi, err := os.Stat(root)
	if err != nil {
		return st, err
	}
	if !fi.IsDir() {
		return st, fmt.Errorf("archive %s: not a directory", root)
	}
	hw := newHashingWriter(w)
	enc, err := zstd.NewWriter(hw, encoderOptions...)
	if err != nil {
		return st, err
	}
	tw := tar.NewWriter(enc)
	wk := &walker{
		ctx:     ctx,
		tw:      tw,
		st:      &st,
		links:   map[fileID]string{},
		buf:     make([]byte, copyBuffer),
		noatime: true,
		top:     opts.Top,
	}
	err = wk.dir(root, ".", fi)
	if err == nil {
		err = tw.Close() // the end-of-archive blocks
	}
	if err == nil {
		err = enc.Close() // the end of the zstd frame, with its checksum
	}
	if err != nil {
		// The encoder is not closed: a partial stream must not end its zstd frame, so that a
		// reader fails on it rather than seeing a shorter archive.
		return st, err
	}
	st.ArchiveBytes, st.SHA256 = hw.n, hw.sum()
	return st, nil
}
