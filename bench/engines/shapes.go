package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// The data shapes of issue 35, each a deterministic tree of its own making with its own change
// between the first and the second backup: what PVCs hold (a source checkout, a database's
// pages rewritten in place, a VM disk image with scattered block writes, many small files, logs
// that grow). Each is regenerated identically for every round.

// sourceTree is a checkout of ~15,000 files (at scale 1) in a tree three levels deep: text
// files of a few hundred bytes to a few hundred KiB (most a few KiB) made of code-like lines,
// and one in 40 a binary blob. The change rewrites 1 % of the files.
func sourceTree(scale float64) dataset {
	files := scaled(15_000, scale)
	d := dataset{name: "source-tree", files: files}
	d.make = func(root string) error {
		for i := range files {
			if err := writeSourceFile(root, i, 0); err != nil {
				return err
			}
		}
		return nil
	}
	d.change = func(root string) (int, error) {
		n := 0
		for i := 50 % files; i < files; i += 100 {
			if err := writeSourceFile(root, i, 1); err != nil {
				return n, err
			}
			n++
		}
		return n, nil
	}
	return d
}

func sourcePath(root string, i int) string {
	return filepath.Join(root, fmt.Sprintf("pkg%02d", i%20), fmt.Sprintf("sub%02d", (i/20)%15), fmt.Sprintf("file%05d.go", i))
}

// sourceSize is the size of source file i: log-uniform between 256 B and 64 KiB, so that most
// files are a few KiB and a few large ones hold much of the bytes, as in a checkout.
func sourceSize(i int) int {
	r := rand.New(rand.NewPCG(uint64(i), 7))
	return int(256 * math.Exp2(r.Float64()*8))
}

var codeWords = []string{"func", "return", "err", "if", "nil", "ctx", "for", "range", "var", "type", "struct", "string", "int64",
	"fmt.Errorf", "context.Context", "strings.Join", "len", "append", "make", "map", "go", "defer", "select", "case", "switch",
	"reconcile", "status", "spec", "client", "object", "backup", "restore", "volume", "manifest", "repository", "snapshot"}

func writeSourceFile(root string, i, generation int) error {
	p := sourcePath(root, i)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	buf := make([]byte, sourceSize(i))
	if i%40 == 39 {
		randomFill(buf, i, generation)
	} else {
		codeFill(buf, i, generation)
	}
	if err := os.WriteFile(p, buf, 0o600); err != nil {
		return err
	}
	return os.Chmod(p, modes[i%2]) // 0644 or 0640
}

// codeFill writes code-like lines: indented statements of a small vocabulary with identifiers
// and numbers, about as compressible as Go source.
func codeFill(buf []byte, i, generation int) {
	r := rand.New(rand.NewPCG(uint64(i), uint64(generation)+100))
	out := buf[:0]
	for len(out) < len(buf) {
		depth := r.IntN(4)
		for range depth {
			out = append(out, '\t')
		}
		for w := range 3 + r.IntN(8) {
			if w > 0 {
				out = append(out, ' ')
			}
			if r.IntN(5) == 0 {
				out = fmt.Appendf(out, "v%d", r.IntN(1000))
			} else {
				out = append(out, codeWords[r.IntN(len(codeWords))]...)
			}
		}
		out = append(out, '\n')
	}
	copy(buf, out)
	if len(out) > len(buf) {
		buf[len(buf)-1] = '\n'
	}
}

// dbPages is a database's data files: 1 GiB at scale 1 in files of up to 128 MiB, of 8 KiB
// pages, each a header, rows of random bytes and free space (zeros), about 2:1 compressible.
// The change rewrites 1 % of the pages in place at random offsets, as a database does between
// two backups.
func dbPages(scale float64) dataset {
	const page = 8 << 10
	total := int64(max(16, scaled(131_072, scale))) * page
	return inPlaceShape("db-pages", total, 128<<20, page, 0.01, 0, pageFill)
}

// vmImage is a VM's disk image: one file of 2 GiB at scale 1, in 1 MiB extents of zeros (left
// as holes), text and random data. The change rewrites 64 blocks of 4 KiB scattered over the
// file's data extents, as a running VM does.
func vmImage(scale float64) dataset {
	total := int64(max(16, scaled(2048, scale))) << 20
	return inPlaceShape("vm-image", total, total, 4<<10, 0, 64, imageFill)
}

// inPlaceShape is a tree of files of up to fileBytes, total bytes in all, written unit by unit
// with fill; the change rewrites a fraction of the units (or count of them) at random offsets.
func inPlaceShape(name string, total, fileBytes int64, unit int, fraction float64, count int, fill func(buf []byte, unit int64, generation int) bool) dataset {
	nfiles := int((total + fileBytes - 1) / fileBytes)
	units := total / int64(unit)
	d := dataset{name: name, files: nfiles}
	fileOf := func(root string, f int) string { return filepath.Join(root, fmt.Sprintf("%s.%03d", name, f)) }
	d.make = func(root string) error {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return err
		}
		buf := make([]byte, unit)
		for f := range nfiles {
			size := min(fileBytes, total-int64(f)*fileBytes)
			if err := writeUnits(fileOf(root, f), size, int64(f)*fileBytes/int64(unit), buf, fill); err != nil {
				return err
			}
		}
		return nil
	}
	d.change = func(root string) (int, error) {
		n := count
		if n == 0 {
			n = max(1, int(float64(units)*fraction))
		}
		r := rand.New(rand.NewPCG(uint64(units), 35))
		buf := make([]byte, unit)
		for done := 0; done < n; {
			u := r.Int64N(units)
			if !fill(buf, u, 1) { // a hole stays a hole: a VM writes where it has data
				continue
			}
			f, err := os.OpenFile(fileOf(root, int(u*int64(unit)/fileBytes)), os.O_WRONLY, 0)
			if err != nil {
				return done, err
			}
			_, err = f.WriteAt(buf, u*int64(unit)%fileBytes)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return done, err
			}
			done++
		}
		return n, nil
	}
	return d
}

// writeUnits writes a file of size bytes, unit by unit from first on; units fill leaves out are
// holes.
func writeUnits(path string, size, first int64, buf []byte, fill func([]byte, int64, int) bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		if fill(buf, first+off/int64(len(buf)), 0) {
			_, err = f.WriteAt(buf, off)
		}
		if err != nil {
			break
		}
	}
	return errors.Join(err, f.Truncate(size), f.Close())
}

// pageFill makes database page u: a header naming it, 60 % rows of random bytes, the rest zeros.
func pageFill(buf []byte, u int64, generation int) bool {
	clear(buf)
	copy(buf, fmt.Sprintf("PAGE %d LSN %d\n", u, generation))
	randomFill(buf[64:64+len(buf)*6/10], int(u), generation)
	return true
}

// imageFill makes 4 KiB block u of a disk image: in extents of 1 MiB (256 blocks), one in four
// is zeros (a hole), one text and two random data.
func imageFill(buf []byte, u int64, generation int) bool {
	switch (u / 256) % 4 {
	case 0:
		return false
	case 1:
		logFill(buf, int(u), generation)
	default:
		randomFill(buf, int(u), generation)
	}
	return true
}

// smallFiles is 100,000 files (at scale 1) of 512 B to 8 KiB, half random and half log-like text,
// 1,000 to a directory; the change rewrites 1 % of them.
func smallFiles(scale float64) dataset {
	return dataset{name: "small-files", files: scaled(100_000, scale), perDir: 1000, fileSize: 8 << 10,
		sizeOf: func(i int) int { return 512 + (i*2654435761)%(7<<10+512) },
		fill: func(buf []byte, i, generation int) {
			if i%2 == 0 {
				randomFill(buf, i, generation)
			} else {
				logFill(buf, i, generation)
			}
		}}
}

// logsAppend is a log directory: 1,024 files of 1 MiB of log-like text (at scale 1); the change
// appends 64 KiB of new lines to one file in ten and starts 4 new files, as logging does.
func logsAppend(scale float64) dataset {
	d := dataset{name: "logs-append", files: scaled(1024, scale), perDir: 100, fileSize: 1 << 20, fill: logFill}
	d.change = func(root string) (int, error) {
		buf := make([]byte, 64<<10)
		n := 0
		for i := 5 % d.files; i < d.files; i += 10 {
			logFill(buf, i, 1)
			f, err := os.OpenFile(d.path(root, i), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return n, err
			}
			_, err = f.Write(buf)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return n, err
			}
			n++
		}
		for j := range 4 {
			p := filepath.Join(root, "current", fmt.Sprintf("app-%d.log", j))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return n, err
			}
			logFill(buf, d.files+j, 1)
			if err := os.WriteFile(p, buf, 0o644); err != nil {
				return n, err
			}
			n++
		}
		return n, nil
	}
	return d
}

func scaled(full int, scale float64) int { return max(1, int(float64(full)*scale+0.5)) }
