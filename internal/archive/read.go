package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
)

// ReadOptions tune Read.
type ReadOptions struct {
	// Chown restores the archived numeric owners (lchown for symlinks). It needs CAP_CHOWN;
	// without it Read fails with EPERM unless IgnoreChownEPERM is set.
	Chown bool
	// IgnoreChownEPERM lets a restore without CAP_CHOWN go on, leaving files owned by the
	// restoring user. Other chown errors still fail the restore.
	IgnoreChownEPERM bool
	// Only extracts the entries of this Selection and skips the others (their content is still
	// read and hashed); nil: every entry.
	Only *Selection
	// VolumeRoots are directories under the destination (a group backup's members, each a
	// volume's mount) that, like the destination itself, keep their owner, mode and mtime when
	// the restore may not change them.
	VolumeRoots []string
}

// decoderOptions bound the decompressor's memory whatever the input claims: one goroutine, and
// frames needing a larger window than Write uses are refused.
var decoderOptions = []zstd.DOption{
	zstd.WithDecoderConcurrency(1),
	zstd.WithDecoderMaxWindow(windowSize),
	zstd.WithDecoderLowmem(true),
}

// Read extracts an archive written by Write into dest, an existing directory, and returns the
// Stats of what it read, including ArchiveBytes and SHA256 of the whole compressed stream, to
// be checked with Manifest.Verify.
//
// It restores directories, regular files (leaving holes where the content has all-zero 64 KiB
// blocks, so sparse files stay sparse), symlinks, hard links, modes and mtimes (directories'
// in a final pass, after their content; symlinks their own), FIFOs, and owners when opts.Chown
// is set. Existing files at an entry's path are replaced.
//
// Read refuses, with an error naming the entry, any entry that would touch something outside
// dest: absolute or ".." names, hard links to such names, and paths that go through a symlink
// (so an archive cannot plant "a" -> /etc and then write "a/passwd"). It fails on a corrupt or
// truncated stream; entries extracted before the failure stay in dest. It stops between
// entries and within large files when ctx ends, returning ctx.Err().
func Read(ctx context.Context, r io.Reader, dest string, opts ReadOptions) (Stats, error) {
	var st Stats
	fi, err := os.Stat(dest)
	if err != nil {
		return st, err
	}
	if !fi.IsDir() {
		return st, fmt.Errorf("restore into %s: not a directory", dest)
	}
	ex := &extractor{ctx: ctx, dest: dest, opts: opts, st: &st, buf: make([]byte, extractBuffer),
		small: newSmallFiles(ctx, opts), known: map[string]struct{}{dest: {}}, volumeRoots: map[string]bool{dest: true}}
	for _, rel := range opts.VolumeRoots {
		ex.volumeRoots[filepath.Join(dest, rel)] = true
	}
	n, sum, err := scan(ctx, r, ex.extract)
	if cerr := ex.small.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return st, err
	}
	if err := ex.finishDirs(); err != nil {
		return st, err
	}
	st.ArchiveBytes, st.SHA256 = n, sum
	return st, nil
}

// scan decompresses an archive stream and calls entry for each tar entry (with the entry's
// content as the reader), then reads the stream to its very end — the zstd frame checksum is
// verified there, and the hash must cover every byte to match the manifest — and returns the size
// and sha256 of the compressed stream. It stops with ctx.Err() between entries.
func scan(ctx context.Context, r io.Reader, entry func(*tar.Header, io.Reader) error) (int64, string, error) {
	hr := newHashingReader(r)
	dec, err := zstd.NewReader(hr, decoderOptions...)
	if err != nil {
		return 0, "", err
	}
	defer dec.Close()
	tr := tar.NewReader(dec)
	for {
		if err := ctx.Err(); err != nil {
			return 0, "", err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, "", fmt.Errorf("read archive: %w", err)
		}
		if err := entry(hdr, tr); err != nil {
			return 0, "", err
		}
	}
	if _, err := io.Copy(io.Discard, dec); err != nil {
		return 0, "", fmt.Errorf("read archive: %w", err)
	}
	if _, err := io.Copy(io.Discard, hr); err != nil {
		return 0, "", fmt.Errorf("read archive: %w", err)
	}
	if hr.n == 0 {
		// An empty object (an upload that never started) would otherwise restore as nothing.
		return 0, "", errors.New("read archive: empty stream")
	}
	return hr.n, hr.sum(), nil
}
