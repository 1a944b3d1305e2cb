package archive

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
)

// Check reads an archive to its end without writing anything and returns the Stats that Read
// would report for it, so that a backup can be verified against its manifest in place: every
// zstd frame checksum is checked and every byte is hashed.
func Check(ctx context.Context, r io.Reader) (Stats, error) {
	var st Stats
	n, sum, err := scan(ctx, r, func(hdr *tar.Header, content io.Reader) error {
		if err := tally(&st, hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := io.Copy(io.Discard, cancellable{ctx, content}); err != nil {
				return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	st.ArchiveBytes, st.SHA256 = n, sum
	return st, nil
}

// cancellable stops a long read when ctx ends.
type cancellable struct {
	ctx context.Context
	r   io.Reader
}

func (c cancellable) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
