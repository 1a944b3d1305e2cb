package run

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/okgoes/okgoes-operator/internal/mover"
)

// The kopia engine's benchmarks, on the volume of issue 12: BENCH_GIB GiB (default 1) of 1 MiB
// files of incompressible data. Each mover runs as a child process, so that its peak RSS is the
// kernel's count:
//
//	go test ./internal/mover/run/ -run '^$' -bench Kopia -benchtime 1x
//
// BenchmarkMoverKopiaBackup is the first backup into a new repository, BenchmarkMoverKopiaIncremental
// the backup after 10 files were rewritten, BenchmarkMoverKopiaRestore a restore into an empty
// directory; each reports the bytes uploaded to the bucket and the peak RSS.

func kopiaBenchVolume(b *testing.B) (string, int64) {
	gib := int64(1)
	if s := os.Getenv("BENCH_GIB"); s != "" {
		fmt.Sscan(s, &gib)
	}
	dir := b.TempDir()
	buf := make([]byte, 1<<20)
	r := rand.NewChaCha8([32]byte{7})
	for i := range gib << 10 {
		r.Read(buf)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir, gib << 30
}

func kopiaBenchEnv(b *testing.B, dir string, run int) env {
	e, _ := setup(b, dir)
	e[EnvEngine] = EngineKopia
	e[EnvKopiaPrefix] = fmt.Sprintf("bench/%d/kopia", run)
	e[EnvKopiaPassword] = kopiaTestPassword
	e[EnvKopiaCacheDir] = b.TempDir()
	return e
}

// uploaded is the size of everything under prefix in the bench bucket.
func uploaded(b *testing.B, e env, prefix string) int64 {
	_, st := storeOf(b, e)
	objs, err := st.List(context.Background(), prefix)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, o := range objs {
		n += o.Size
	}
	return n
}

func BenchmarkMoverKopiaBackup(b *testing.B) {
	dir, size := kopiaBenchVolume(b)
	b.SetBytes(size)
	var rss int64
	run := 0
	for b.Loop() {
		b.StopTimer()
		run++
		e := kopiaBenchEnv(b, dir, run)
		b.StartTimer()
		_, r := runChild(b, "mover", e)
		rss = max(rss, r)
	}
	b.ReportMetric(float64(rss)/(1<<20), "peakRSS-MiB")
}

func BenchmarkMoverKopiaIncremental(b *testing.B) {
	dir, size := kopiaBenchVolume(b)
	e := kopiaBenchEnv(b, dir, 0)
	runChild(b, "mover", e) // the first backup, untimed
	before := uploaded(b, e, "bench/0/kopia/")
	b.SetBytes(size)
	var rss int64
	n := 0
	for b.Loop() {
		b.StopTimer()
		n++
		r := rand.NewChaCha8([32]byte{byte(n)})
		buf := make([]byte, 1<<20)
		for i := range 10 {
			r.Read(buf)
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i*97)), buf, 0o644)
		}
		nextRun(e, fmt.Sprintf("20261203T%02d0000Z", 3+n))
		b.StartTimer()
		_, m := runChild(b, "mover", e)
		rss = max(rss, m)
	}
	b.StopTimer()
	b.ReportMetric(float64(uploaded(b, e, "bench/0/kopia/")-before)/float64(n)/(1<<20), "uploaded-MiB/op")
	b.ReportMetric(float64(rss)/(1<<20), "peakRSS-MiB")
}

func BenchmarkMoverKopiaRestore(b *testing.B) {
	dir, size := kopiaBenchVolume(b)
	e := kopiaBenchEnv(b, dir, 0)
	runChild(b, "mover", e) // the backup to restore, untimed
	b.SetBytes(size)
	benchmarkRestores(b, e, func() {
		e[EnvKopiaCacheDir] = b.TempDir() // a new pod: nothing cached
	})
}

// BenchmarkMoverKopiaCleanRestore times a Clean restore into a target that holds a file, which
// reads the whole backup back before it empties the target (proveBeforeClean), against a
// restore into an empty target, interleaved; it reports both and the ratio:
//
//	go test ./internal/mover/run/ -run '^$' -bench KopiaCleanRestore -benchtime 3x
//	BENCH_SMALL_FILES=200000 go test ./internal/mover/run/ -run '^$' -bench KopiaCleanRestore -benchtime 2x
//
// BENCH_SMALL_FILES=n backs up n files of 4 KiB (1,000 a directory) instead of BENCH_GIB.
// smallFilesVolume writes n (a decimal string) files of 4 KiB of random data, 1,000 a directory.
func smallFilesVolume(b *testing.B, n string) (string, int64) {
	var count int
	fmt.Sscan(n, &count)
	dir := b.TempDir()
	buf := make([]byte, 4<<10)
	r := rand.NewChaCha8([32]byte{9})
	for i := range count {
		sub := filepath.Join(dir, fmt.Sprintf("d%04d", i/1000))
		if i%1000 == 0 {
			if err := os.Mkdir(sub, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		r.Read(buf)
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%06d", i)), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir, int64(count) << 12
}

func BenchmarkMoverKopiaCleanRestore(b *testing.B) {
	var dir string
	var size int64
	if s := os.Getenv("BENCH_SMALL_FILES"); s != "" {
		dir, size = smallFilesVolume(b, s)
	} else {
		dir, size = kopiaBenchVolume(b)
	}
	e := kopiaBenchEnv(b, dir, 0)
	runChild(b, "mover", e) // the backup to restore, untimed
	b.SetBytes(size)
	var plain, clean time.Duration
	n := 0
	for b.Loop() {
		n++
		for _, full := range []bool{false, true} {
			target := b.TempDir()
			e[EnvTargetDir], e[EnvOverwrite] = target, ""
			if full {
				os.WriteFile(filepath.Join(target, "old"), []byte("old data"), 0o644)
				e[EnvOverwrite] = "Clean"
			}
			e[EnvKopiaCacheDir] = b.TempDir() // a new pod: nothing cached
			d, _ := runChild(b, "restore", e)
			if full {
				clean += d
			} else {
				plain += d
			}
			os.RemoveAll(target)
		}
	}
	b.ReportMetric(plain.Seconds()/float64(n), "restore-s")
	b.ReportMetric(clean.Seconds()/float64(n), "clean-restore-s")
	b.ReportMetric(clean.Seconds()/plain.Seconds(), "clean/plain")
}

// BenchmarkMoverKopiaPathRestore times a restore of one 1 MiB file (spec.paths: [big/one.bin])
// out of a backup of BENCH_SMALL_FILES files of 4 KiB (default 20,000; issue 34 asks for
// 200,000) plus that file, against a full restore of the same backup, interleaved, each in a new
// pod (nothing cached); it reports both and the ratio:
//
//	BENCH_SMALL_FILES=200000 go test ./internal/mover/run/ -run '^$' -bench KopiaPathRestore -benchtime 1x
func BenchmarkMoverKopiaPathRestore(b *testing.B) {
	n := os.Getenv("BENCH_SMALL_FILES")
	if n == "" {
		n = "20000"
	}
	dir, _ := smallFilesVolume(b, n)
	buf := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{11}).Read(buf)
	if err := os.MkdirAll(filepath.Join(dir, "big"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big/one.bin"), buf, 0o644); err != nil {
		b.Fatal(err)
	}
	e := kopiaBenchEnv(b, dir, 0)
	runChild(b, "mover", e) // the backup to restore, untimed
	var one, full time.Duration
	runs := 0
	for b.Loop() {
		runs++
		for _, paths := range []string{EncodePaths([]string{"big/one.bin"}), ""} {
			target := b.TempDir()
			e[EnvTargetDir], e[EnvOverwrite], e[EnvRestorePaths] = target, "", paths
			e[EnvKopiaCacheDir] = b.TempDir() // a new pod: nothing cached
			d, _ := runChild(b, "restore", e)
			if paths != "" {
				one += d
				if fi, err := os.Stat(filepath.Join(target, "big/one.bin")); err != nil || fi.Size() != 1<<20 {
					b.Fatalf("the path restore wrote %v (%v)", fi, err)
				}
			} else {
				full += d
			}
			os.RemoveAll(target)
		}
	}
	b.ReportMetric(one.Seconds()/float64(runs), "one-file-restore-s")
	b.ReportMetric(full.Seconds()/float64(runs), "full-restore-s")
	b.ReportMetric(full.Seconds()/one.Seconds(), "full/one-file")
}
