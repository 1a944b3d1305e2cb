package archive

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

func TestReadDetectsAFlippedByte(t *testing.T) {
	src, _ := buildTree(t, false)
	var buf bytes.Buffer
	ws, err := Write(context.Background(), src, &buf, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := NewManifest("id", "ns", "pvc", "key", ws)
	archive := buf.Bytes()
	// Spread over the stream: headers, compressible text, incompressible data, the frame end.
	for _, at := range []int{len(archive) / 7, len(archive) / 3, len(archive) / 2, len(archive) * 5 / 6, len(archive) - 2} {
		flipped := bytes.Clone(archive)
		flipped[at] ^= 0x40
		rs, err := Read(context.Background(), bytes.NewReader(flipped), t.TempDir(), ReadOptions{})
		if err == nil {
			if err = m.Verify(rs); !errors.Is(err, ErrMismatch) {
				t.Errorf("byte %d of %d flipped: Read and Verify both passed (%v)", at, len(archive), err)
			}
		}
	}
}

func TestReadFailsOnATruncatedOrExtendedArchive(t *testing.T) {
	src, _ := buildTree(t, false)
	var buf bytes.Buffer
	if _, err := Write(context.Background(), src, &buf, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	archive := buf.Bytes()
	for _, n := range []int{0, 3, 100, len(archive) / 3, len(archive) * 2 / 3, len(archive) - 4, len(archive) - 1} {
		if _, err := Read(context.Background(), bytes.NewReader(archive[:n]), t.TempDir(), ReadOptions{}); err == nil {
			t.Errorf("archive cut to %d of %d bytes was read without error", n, len(archive))
		}
	}
	// Nor may anything follow the archive: it would not be what the manifest describes.
	extended := append(bytes.Clone(archive), "trailing"...)
	if _, err := Read(context.Background(), bytes.NewReader(extended), t.TempDir(), ReadOptions{}); err == nil {
		t.Error("an archive with trailing bytes was read without error")
	}
}
