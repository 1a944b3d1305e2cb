package archive

import (
	"bytes"
	"context"
	"io"
	"os"
)

// holeBlock is the unit of hole detection on restore. Sparse files (VM disks, databases) can
// be far larger than the volume holds; 64 KiB keeps the check cheap while still finding the
// holes that matter.
const holeBlock = 64 << 10

// extractBuffer is how much content Read handles at once: a multiple of holeBlock.
const extractBuffer = 16 * holeBlock

var zeroBlock = make([]byte, holeBlock)

// writeSparse copies size bytes from r into the empty file f, skipping all-zero blocks instead
// of writing them, so the file system allocates nothing for them.
func writeSparse(ctx context.Context, f *os.File, r io.Reader, size int64, buf []byte) error {
	var off int64
	for off < size {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), size-off)])
		if err != nil {
			return err
		}
		chunk := buf[:n]
		// Write each run of non-zero blocks with one call.
		for len(chunk) > 0 {
			data := 0
			for data < len(chunk) && !isZero(chunk[data:min(data+holeBlock, len(chunk))]) {
				data += holeBlock
			}
			data = min(data, len(chunk))
			if data > 0 {
				if _, err := f.WriteAt(chunk[:data], off); err != nil {
					return err
				}
			} else {
				data = min(holeBlock, len(chunk)) // a hole: leave it
			}
			chunk, off = chunk[data:], off+int64(data)
		}
	}
	// A trailing hole was never written: the size must still be right.
	return f.Truncate(size)
}

func isZero(b []byte) bool { return bytes.Equal(b, zeroBlock[:len(b)]) }
