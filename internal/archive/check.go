package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// Check reads an archive to its end without writing anything and returns the Stats that Read
// would report for it, so that a backup can be verified against its manifest in place: every
// zstd frame checksum is checked and every byte is hashed.
func Check(ctx context.Context, r io.Reader) (Stats, error) {
	var st Stats
	hr := newHashingReader(r)
	dec, err := zstd.NewReader(hr, decoderOptions...)
	if err != nil {
		return st, err
	}
	defer dec.Close()
	tr := tar.NewReader(dec)
	for {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("read archive: %w", err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			st.Dirs++
		case tar.TypeReg:
			st.Files++
			st.ContentBytes += hdr.Size
			if _, err := io.Copy(io.Discard, cancellable{ctx, tr}); err != nil {
				return st, fmt.Errorf("archive entry %q: %w", hdr.Name, err)
			}
		case tar.TypeSymlink:
			st.Symlinks++
		case tar.TypeLink:
			st.HardLinks++
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			st.Skipped++
		case tar.TypeXGlobalHeader:
		default:
			return st, fmt.Errorf("archive entry %q: unsupported type %q", hdr.Name, hdr.Typeflag)
		}
	}
	if _, err := io.Copy(io.Discard, dec); err != nil {
		return st, fmt.Errorf("read archive: %w", err)
	}
	if _, err := io.Copy(io.Discard, hr); err != nil {
		return st, fmt.Errorf("read archive: %w", err)
	}
	if hr.n == 0 {
		return st, errors.New("read archive: empty stream")
	}
	st.ArchiveBytes, st.SHA256 = hr.n, hr.sum()
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
