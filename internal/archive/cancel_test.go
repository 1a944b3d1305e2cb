package archive

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteStopsWhenCancelledBetweenFiles(t *testing.T) {
	src, _ := buildTree(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Write(ctx, src, io.Discard, WriteOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Write on a cancelled context = %v, want context.Canceled", err)
	}
}

// cancelAfter cancels its context once n bytes went through it, and counts all of them.
type cancelAfter struct {
	w       io.Writer
	n, seen int64
	cancel  context.CancelFunc
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	c.seen += int64(len(p))
	if c.seen >= c.n {
		c.cancel()
	}
	return c.w.Write(p)
}

func TestWriteStopsWhenCancelledWithinAFile(t *testing.T) {
	src := t.TempDir()
	const size = 64 << 20
	data := make([]byte, size) // random, so compressed bytes track the bytes read
	rand.NewChaCha8([32]byte{1}).Read(data)
	if err := os.WriteFile(filepath.Join(src, "big"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out bytes.Buffer
	w := &cancelAfter{w: &out, n: 1 << 20, cancel: cancel}
	if _, err := Write(ctx, src, w, WriteOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Write = %v, want context.Canceled", err)
	}
	if w.seen > 4<<20 {
		t.Errorf("Write went on for %d bytes after being cancelled at 1 MiB of a %d-byte file", w.seen, size)
	}
	// What was written must not pass for an archive.
	if _, err := Read(context.Background(), &out, t.TempDir(), ReadOptions{}); err == nil {
		t.Error("the stream of a cancelled Write was read as a complete archive")
	}
}

// cancelReader cancels its context once n bytes were read through it.
type cancelReader struct {
	r      io.Reader
	n      int64
	cancel context.CancelFunc
}

func (c *cancelReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n -= int64(n); c.n <= 0 {
		c.cancel()
	}
	return n, err
}

func TestReadStopsWhenCancelled(t *testing.T) {
	src := t.TempDir()
	data := make([]byte, 16<<20)
	rand.NewChaCha8([32]byte{2}).Read(data)
	if err := os.WriteFile(filepath.Join(src, "big"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := Write(context.Background(), src, &buf, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dst := t.TempDir()
	r := &cancelReader{r: &buf, n: 1 << 20, cancel: cancel}
	if _, err := Read(ctx, r, dst, ReadOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read = %v, want context.Canceled", err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "big")); err == nil && fi.Size() == int64(len(data)) {
		// The file may exist, partly written; its final size is set only at the end.
		t.Error("Read finished the file after being cancelled")
	}
}
