package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// dataset is a deterministic tree: file i of it has content(i, generation) and a mode from i.
type dataset struct {
	name     string
	files    int
	perDir   int
	fileSize int
	// fill writes the content of file i of the given generation into buf (len fileSize).
	fill func(buf []byte, i, generation int)
	// sizeOf, when set, is the size of file i (at most fileSize) instead of fileSize.
	sizeOf func(i int) int
	// make and change, when set, replace generate's and rewrite's tree of numbered files
	// (shapes.go).
	make   func(root string) error
	change func(root string) (int, error)
}

// modes vary across files so that the restored trees' modes are checked for real.
var modes = []os.FileMode{0o644, 0o640, 0o600, 0o755}

func (d dataset) path(root string, i int) string {
	return filepath.Join(root, fmt.Sprintf("d%04d", i/d.perDir), fmt.Sprintf("f%07d", i))
}

// generate writes the whole tree (generation 0).
func (d dataset) generate(root string) error {
	if d.make != nil {
		return d.make(root)
	}
	buf := make([]byte, d.fileSize)
	for i := range d.files {
		if i%d.perDir == 0 {
			if err := os.MkdirAll(filepath.Dir(d.path(root, i)), 0o755); err != nil {
				return err
			}
		}
		if err := d.write(root, buf, i, 0); err != nil {
			return err
		}
	}
	return nil
}

func (d dataset) write(root string, buf []byte, i, generation int) error {
	if d.sizeOf != nil {
		buf = buf[:d.sizeOf(i)]
	}
	d.fill(buf, i, generation)
	p := d.path(root, i)
	if err := os.WriteFile(p, buf, 0o600); err != nil {
		return err
	}
	return os.Chmod(p, modes[i%len(modes)])
}

// rewrite gives 1 % of the files (every 100th, at least one) new content of the same size, as
// an application rewriting some of its files between two backups would. It returns their count.
func (d dataset) rewrite(root string) (int, error) {
	if d.change != nil {
		return d.change(root)
	}
	buf := make([]byte, d.fileSize)
	n := 0
	for i := 50 % d.files; i < d.files; i += 100 {
		if err := d.write(root, buf, i, 1); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func randomFill(buf []byte, i, generation int) {
	var seed [32]byte
	seed[0], seed[1], seed[2], seed[3], seed[4] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24), byte(generation)
	rand.NewChaCha8(seed).Read(buf)
}

var (
	logLevels     = []string{"INFO", "INFO", "INFO", "INFO", "DEBUG", "DEBUG", "WARN", "ERROR"}
	logComponents = []string{"http", "db", "cache", "auth", "scheduler", "worker", "grpc", "billing"}
	logPaths      = []string{"/api/v1/orders", "/api/v1/users", "/api/v1/cart", "/healthz", "/api/v2/search", "/metrics", "/api/v1/payments", "/login"}
	logMessages   = []string{"request served", "query executed", "cache miss", "token refreshed", "job finished", "retrying upstream call", "slow response", "connection reset by peer"}
)

// logFill writes log-like text: timestamped lines from a small vocabulary with random ids and
// numbers, about as compressible as application logs.
func logFill(buf []byte, i, generation int) {
	r := rand.New(rand.NewPCG(uint64(i), uint64(generation)+1))
	ts := int64(1_764_900_000_000) + int64(i)*3_600_000 + int64(generation)*86_400_000 // ms
	out := buf[:0]
	for len(out) < len(buf) {
		ts += int64(r.IntN(50))
		sec := ts / 1000
		out = fmt.Appendf(out, "2026-12-05T%02d:%02d:%02d.%03dZ %-5s [%s] %s method=%s path=%s status=%d latency_ms=%d request_id=%016x user_id=%d bytes=%d\n",
			sec/3600%24, sec/60%60, sec%60, ts%1000, logLevels[r.IntN(len(logLevels))], logComponents[r.IntN(len(logComponents))],
			logMessages[r.IntN(len(logMessages))], []string{"GET", "POST", "PUT", "DELETE"}[r.IntN(4)], logPaths[r.IntN(len(logPaths))],
			[]int{200, 200, 200, 201, 204, 304, 404, 500}[r.IntN(8)], r.IntN(2000), r.Uint64(), r.IntN(100000), r.IntN(1<<20))
	}
	copy(buf, out) // out may have grown past buf's capacity: the file is cut at fileSize
	if len(out) > len(buf) {
		buf[len(buf)-1] = '\n'
	}
}

// datasets at the given scale: issue 35's shapes (shapes.go) and issue 12's trees of files of one
// size (the file count scales, the file size not; an in-place shape's bytes scale).
func datasets(scale float64) []dataset {
	n := func(full int) int { return scaled(full, scale) }
	return []dataset{
		sourceTree(scale), dbPages(scale), vmImage(scale), smallFiles(scale), logsAppend(scale),
		{name: "random-1MiB", files: n(1024), perDir: 100, fileSize: 1 << 20, fill: randomFill},
		{name: "small-4KiB", files: n(200_000), perDir: 1000, fileSize: 4 << 10, fill: randomFill},
		{name: "logs", files: n(1024), perDir: 100, fileSize: 1 << 20, fill: logFill},
		{name: "million-1KiB", files: n(1_000_000), perDir: 1000, fileSize: 1 << 10, fill: randomFill},
	}
}
