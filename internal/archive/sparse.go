package archive

import (
	"bytes"
	"context"
	"io"
)

// holeBlock is the unit of hole detection on restore. Sparse files (VM disks, databases) can
// be far larger than the volume holds; 64 KiB keeps the check cheap while still finding the
// holes that matter.
const holeBlock = 64 << 10

// extractBuffer is how much content Read handles at once: a multiple of holeBlock.
const extractBuffer = 16 * holeBlock

var zeroBlock = make([]byte, holeBlock)

// sparseFile is where writeSparse writes: an *os.File, or a bare descriptor (fdWriter).
type sparseFile interface {
	WriteAt(p []byte, off int64) (int, error)
	Truncate(size int64) error
}

// writeSparse copies size bytes from r into the empty file f, skipping all-zero blocks instead
// of writing them, so the file system allocates nothing for them.
func writeSparse(ctx context.Context, f sparseFile, r io.Reader, size int64, buf []byte) error {
	var off, end int64
	for off < size {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), size-off)])
		if err != nil {
			return err
		}
		if e, err := writeChunk(f, buf[:n], off); err != nil {
			return err
		} else if e > 0 {
			end = e
		}
		off += int64(n)
	}
	return setSize(f, end, size)
}

// writeRuns writes data, the whole content of the empty file f, as writeSparse does.
func writeRuns(f sparseFile, data []byte, off, size int64) error {
	end, err := writeChunk(f, data, off)
	if err != nil {
		return err
	}
	return setSize(f, end, size)
}

// setSize gives f its size when its end is a hole, which was never written.
func setSize(f sparseFile, end, size int64) error {
	if end < size {
		return f.Truncate(size)
	}
	return nil
}

// writeChunk writes the chunk of content that starts at off, each run of non-zero blocks with
// one call, and returns the end of the last run written (0 if none was).
func writeChunk(f sparseFile, chunk []byte, off int64) (end int64, err error) {
	for len(chunk) > 0 {
		data := 0
		for data < len(chunk) && !isZero(chunk[data:min(data+holeBlock, len(chunk))]) {
			data += holeBlock
		}
		data = min(data, len(chunk))
		if data > 0 {
			if _, err := f.WriteAt(chunk[:data], off); err != nil {
				return end, err
			}
			end = off + int64(data)
		} else {
			data = min(holeBlock, len(chunk)) // a hole: leave it
		}
		chunk, off = chunk[data:], off+int64(data)
	}
	return end, nil
}

func isZero(b []byte) bool { return bytes.Equal(b, zeroBlock[:len(b)]) }
