package kopiarepo

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// BenchmarkRestore restores two trees of issue 35's shapes from a real MinIO as the mover does:
// each iteration opens the repository with a new cache and without a disk cache of data
// (NoDiskCache, as a mover restore opens it), restores into a new directory and closes. The
// trees are a source checkout (15,000 files of 256 B to 64 KiB, log-uniform, code-like text
// and some random, in 300 directories) and 100,000 small files (512 B to 8 KiB, 1,000 to a
// directory), both times KOPIAREPO_BENCH_SCALE (default 0.2). Profile it with the go tool's
// flags (docs/benchmarks.md, "Restore: where the time goes"):
//
//	go test ./internal/kopiarepo -run '^$' -bench Restore -benchtime 3x \
//	  -cpuprofile /tmp/cpu.out -blockprofile /tmp/block.out -mutexprofile /tmp/mutex.out -trace /tmp/trace.out
func BenchmarkRestore(b *testing.B) {
	scale := 0.2
	if s, err := strconv.ParseFloat(os.Getenv("KOPIAREPO_BENCH_SCALE"), 64); err == nil && s > 0 {
		scale = s
	}
	bk := newBucket(b)
	for _, shape := range []struct {
		name  string
		files int
		write func(root string, i int) error
	}{
		{"source-tree", int(15_000 * scale), benchSourceFile},
		{"small-files", int(100_000 * scale), benchSmallFile},
	} {
		b.Run(shape.name, func(b *testing.B) {
			ctx := context.Background()
			src := b.TempDir()
			for i := range shape.files {
				if err := shape.write(src, i); err != nil {
					b.Fatal(err)
				}
			}
			cfg := bk.config("bench/" + shape.name)
			r, err := Open(ctx, cfg, testPassword, Options{CacheDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			snap, err := r.Backup(ctx, src, BackupOptions{})
			if cerr := r.Close(ctx); err == nil {
				err = cerr
			}
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				r, err := Open(ctx, cfg, testPassword, Options{CacheDir: b.TempDir(), NoCreate: true, NoDiskCache: true})
				if err != nil {
					b.Fatal(err)
				}
				st, err := r.Restore(ctx, snap.ID, filepath.Join(b.TempDir(), "target"))
				if cerr := r.Close(ctx); err == nil {
					err = cerr
				}
				if err != nil || st.Files != shape.files {
					b.Fatalf("restored %d of %d files: %v", st.Files, shape.files, err)
				}
			}
			b.ReportMetric(float64(shape.files)*float64(b.N)/b.Elapsed().Seconds(), "files/s")
		})
	}
}

func benchSourceFile(root string, i int) error {
	r := rand.New(rand.NewPCG(uint64(i), 7))
	buf := make([]byte, int(256*math.Exp2(r.Float64()*8)))
	if i%40 == 39 {
		for j := range buf {
			buf[j] = byte(r.Uint32())
		}
	} else {
		for j := 0; j < len(buf); {
			j += copy(buf[j:], fmt.Sprintf("\tif err := reconcile%d(ctx, obj); err != nil { return fmt.Errorf(\"step %d: %%w\", err) }\n", r.IntN(1000), r.IntN(100)))
		}
	}
	return benchWrite(filepath.Join(root, fmt.Sprintf("pkg%02d", i%20), fmt.Sprintf("sub%02d", (i/20)%15), fmt.Sprintf("file%05d.go", i)), buf)
}

func benchSmallFile(root string, i int) error {
	r := rand.New(rand.NewPCG(uint64(i), 8))
	buf := make([]byte, 512+r.IntN(7<<10+512))
	for j := range buf {
		buf[j] = byte(r.Uint32())
	}
	return benchWrite(filepath.Join(root, fmt.Sprintf("d%03d", i/1000), fmt.Sprintf("f%06d", i)), buf)
}

func benchWrite(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}
