package kopiarepo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// BenchmarkRestore restores trees of issue 35's shapes from a real MinIO as the mover does:
// each iteration opens the repository with a new cache and without a disk cache of data
// (NoDiskCache, as a mover restore opens it), restores into a new directory and closes. The
// trees are a source checkout (15,000 files of 256 B to 64 KiB, log-uniform, code-like text
// and some random, in 300 directories), 100,000 small files (512 B to 8 KiB, 1,000 to a
// directory), both times KOPIAREPO_BENCH_SCALE (default 0.2), and bench/engines' database
// pages (8 × KOPIAREPO_BENCH_SCALE files of 128 MiB of 8 KiB pages, restored after 1 % of the
// pages were rewritten in place and backed up again) and bench/engines' logs (1,024 ×
// KOPIAREPO_BENCH_SCALE logs of 1 MiB, restored after 64 KiB were appended to one in ten and
// backed up again). Profile it with the go tool's
// flags (docs/benchmarks.md, "Restore: where the time goes"):
//
//	go test ./internal/kopiarepo -run '^$' -bench Restore -benchtime 3x \
//	  -cpuprofile /tmp/cpu.out -blockprofile /tmp/block.out -mutexprofile /tmp/mutex.out -trace /tmp/trace.out
func BenchmarkRestore(b *testing.B) {
	bk := newBucket(b)
	for _, shape := range benchShapes() {
		b.Run(shape.name, func(b *testing.B) {
			src := shape.tree(b)
			cfg := bk.config("bench/" + shape.name)
			snap := benchBackup(b, cfg, src)
			if change := changes[shape.name]; change != nil { // restore what a second backup left, as bench/engines does
				if err := change(src, shape.files); err != nil {
					b.Fatal(err)
				}
				snap = benchBackup(b, cfg, src)
			}
			b.ResetTimer()
			for b.Loop() {
				benchRestoreOnce(b, cfg, snap.ID, shape.files)
			}
			b.ReportMetric(float64(shape.files)*float64(b.N)/b.Elapsed().Seconds(), "files/s")
		})
	}
}

// benchShape is a tree of one of issue 35's shapes, KOPIAREPO_BENCH_SCALE (default 0.2) times
// its size in bench/engines.
type benchShape struct {
	name  string
	files int
	write func(root string, i int) error
}

func benchShapes() []benchShape {
	scale := 0.2
	if s, err := strconv.ParseFloat(os.Getenv("KOPIAREPO_BENCH_SCALE"), 64); err == nil && s > 0 {
		scale = s
	}
	return []benchShape{
		{"source-tree", int(15_000 * scale), benchSourceFile},
		{"small-files", int(100_000 * scale), benchSmallFile},
		{"db-pages", max(1, int(8*scale)), benchPagesFile},
		{"logs-append", int(1024 * scale), benchLogFile},
	}
}

// tree writes the shape's files into a new directory.
func (s benchShape) tree(b *testing.B) string {
	src := b.TempDir()
	for i := range s.files {
		if err := s.write(src, i); err != nil {
			b.Fatal(err)
		}
	}
	return src
}

// BenchmarkFirstBackup backs up a tree of each shape into a new repository with a new cache, as
// a mover's first backup: where its CPU goes (zstd, the splitter, the hash, the upload).
//
//	KOPIAREPO_BENCH_SCALE=1 go test ./internal/kopiarepo -run '^$' -bench FirstBackup/logs -benchtime 3x -cpuprofile /tmp/cpu.out
func BenchmarkFirstBackup(b *testing.B) {
	bk := newBucket(b)
	for _, shape := range benchShapes() {
		b.Run(shape.name, func(b *testing.B) {
			src := shape.tree(b)
			n := 0
			for b.Loop() {
				n++
				benchBackup(b, bk.config(fmt.Sprintf("bench/%s-%d", shape.name, n)), src)
			}
		})
	}
}

// changes are the shapes' changes between the two backups of a shape restored after a second one.
var changes = map[string]func(root string, files int) error{"db-pages": rewritePages, "logs-append": appendLogs}

func benchBackup(b *testing.B, cfg S3Config, src string) SnapshotInfo {
	ctx := context.Background()
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
	return snap
}

// benchRestoreOnce restores snapshot id as the mover does: a new connection and cache, no disk
// cache of data.
func benchRestoreOnce(b *testing.B, cfg S3Config, id string, files int) {
	ctx := context.Background()
	r, err := Open(ctx, cfg, testPassword, Options{CacheDir: b.TempDir(), NoCreate: true, NoDiskCache: true})
	if err != nil {
		b.Fatal(err)
	}
	st, err := r.Restore(ctx, id, filepath.Join(b.TempDir(), "target"))
	if cerr := r.Close(ctx); err == nil {
		err = cerr
	}
	if err != nil || st.Files != files {
		b.Fatalf("restored %d of %d files: %v", st.Files, files, err)
	}
}

// benchPage is the size of a database page (bench/engines' db-pages shape).
const benchPage = 8 << 10

// benchPagesFile writes file i of the db-pages shape: 128 MiB of 8 KiB pages, each a header,
// 60 % random rows and zeros.
func benchPagesFile(root string, i int) error {
	const size = 128 << 20
	buf := make([]byte, size)
	for p := 0; p < size/benchPage; p++ {
		fillPage(buf[p*benchPage:(p+1)*benchPage], i*(size/benchPage)+p, 0)
	}
	return benchWrite(filepath.Join(root, fmt.Sprintf("db-pages.%03d", i)), buf)
}

func fillPage(page []byte, n, generation int) {
	clear(page)
	copy(page, fmt.Sprintf("PAGE %d LSN %d\n", n, generation))
	_, _ = rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24), byte(generation)}).Read(page[64 : 64+len(page)*6/10])
}

// rewritePages rewrites 1 % of the pages of the files in place at random offsets.
func rewritePages(root string, files int) error {
	r := rand.New(rand.NewPCG(uint64(files), 35))
	page := make([]byte, benchPage)
	const perFile = (128 << 20) / benchPage
	for range files * perFile / 100 {
		n := r.IntN(files * perFile)
		f, err := os.OpenFile(filepath.Join(root, fmt.Sprintf("db-pages.%03d", n/perFile)), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		fillPage(page, n, 1)
		_, err = f.WriteAt(page, int64(n%perFile)*benchPage)
		if err := errors.Join(err, f.Close()); err != nil {
			return err
		}
	}
	return nil
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

// benchLogFile writes file i of the logs-append shape: 1 MiB of log lines (bench/engines' logFill).
func benchLogFile(root string, i int) error {
	return benchWrite(filepath.Join(root, fmt.Sprintf("d%02d", i/100), fmt.Sprintf("app-%04d.log", i)), logText(1<<20, i, 0))
}

// appendLogs appends 64 KiB of lines to one log in ten.
func appendLogs(root string, files int) error {
	for i := 5 % files; i < files; i += 10 {
		f, err := os.OpenFile(filepath.Join(root, fmt.Sprintf("d%02d", i/100), fmt.Sprintf("app-%04d.log", i)), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, err = f.Write(logText(64<<10, i, 1))
		if err := errors.Join(err, f.Close()); err != nil {
			return err
		}
	}
	return nil
}

func logText(size, i, generation int) []byte {
	r := rand.New(rand.NewPCG(uint64(i), uint64(generation)+1))
	out := make([]byte, 0, size+256)
	for len(out) < size {
		out = fmt.Appendf(out, "2026-12-05T%02d:%02d:%02d.%03dZ %s [%s] method=%s status=%d latency_ms=%d request_id=%016x user_id=%d\n",
			r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1000), []string{"INFO", "WARN", "DEBUG", "ERROR"}[r.IntN(4)],
			[]string{"api", "db", "cache", "auth", "queue"}[r.IntN(5)], []string{"GET", "POST", "PUT"}[r.IntN(3)],
			[]int{200, 201, 204, 404, 500}[r.IntN(5)], r.IntN(2000), r.Uint64(), r.IntN(100000))
	}
	return out[:size]
}

func benchWrite(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}
