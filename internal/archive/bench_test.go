package archive

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// benchTree makes about 256 MiB: large random (incompressible) files, large log-like
// (compressible) files, and 4096 small files, where per-file costs show.
func benchTree(b *testing.B) (root string, size int64) {
	b.Helper()
	root = b.TempDir()
	rnd := rand.NewChaCha8([32]byte{9})
	write := func(rel string, data []byte) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		size += int64(len(data))
	}
	for i := range 15 {
		data := make([]byte, 16<<20)
		if i%2 == 0 {
			rnd.Read(data)
		} else {
			var line bytes.Buffer
			for n := 0; line.Len() < len(data); n++ {
				fmt.Fprintf(&line, "ts=%d level=info volume=pvc-%d bytes=%d msg=\"copied block\"\n", 1700000000+n, n%7, rnd.Uint64()%100000)
			}
			copy(data, line.Bytes())
		}
		write(fmt.Sprintf("big/%02d", i), data)
	}
	small := make([]byte, 4<<10)
	for i := range 4096 {
		rnd.Read(small[:len(small)/2]) // half random, half zeros
		write(fmt.Sprintf("small/%02d/%04d", i%64, i), small)
	}
	return root, size
}

func BenchmarkWrite(b *testing.B) {
	root, size := benchTree(b)
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Write(context.Background(), root, io.Discard, WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRead(b *testing.B) {
	root, size := benchTree(b)
	benchmarkRead(b, root, size)
}

// benchmarkRead restores the archive of root into a new directory per iteration.
func benchmarkRead(b *testing.B, root string, size int64) {
	var archive bytes.Buffer
	if _, err := Write(context.Background(), root, &archive, WriteOptions{}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	dst := b.TempDir()
	for b.Loop() {
		into, err := os.MkdirTemp(dst, "")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Read(context.Background(), bytes.NewReader(archive.Bytes()), into, ReadOptions{}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := os.RemoveAll(into); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// smallTree makes 20,000 random 4 KiB files, 1,000 per directory: a tenth of issue 13's
// small-file tree, where the per-file costs (system calls, headers, creates) are the whole cost.
func smallTree(b *testing.B) (root string, size int64) {
	b.Helper()
	root = b.TempDir()
	rnd := rand.NewChaCha8([32]byte{13})
	data := make([]byte, 4<<10)
	for i := range 20_000 {
		dir := filepath.Join(root, fmt.Sprintf("d%02d", i/1000))
		if i%1000 == 0 {
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		rnd.Read(data)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%06d", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
		size += int64(len(data))
	}
	return root, size
}

func BenchmarkWriteSmallFiles(b *testing.B) {
	root, size := smallTree(b)
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Write(context.Background(), root, io.Discard, WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadSmallFiles(b *testing.B) {
	root, size := smallTree(b)
	benchmarkRead(b, root, size)
}
