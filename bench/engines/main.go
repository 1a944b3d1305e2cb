// Command engines benchmarks the mover's kopia engine against restic 0.18.1, the stock kopia CLI
// and a raw `tar | PutObject` on the data shapes of issue 35 (shapes.go; issue 12's by name),
// with one MinIO (bin/minio) on loopback for all. Each dataset is measured in -rounds interleaved
// rounds (bench.go: run), each on new repositories with the tools' order rotated: every tool's
// first backup, the shape's change (files rewritten, pages or blocks rewritten in place, logs
// appended), every second backup, every restore into an empty directory, each restored tree
// checked against the source (content and mode). Every tool runs as a child process, so that its
// peak RSS is the kernel's ru_maxrss of that process, with a new cache directory per run as the
// mover in its Job. The tables give medians over the rounds, their spread and the ratios
// mover ÷ restic, mover ÷ kopia CLI and mover ÷ raw (report.go).
//
//	make bench-engines                                     # builds bin/restic-0.18.1 and bin/kopia when missing
//	go run ./bench/engines -scale 0.05 -rounds 1           # a quick run
//	go run ./bench/engines -datasets source-tree,small-files -tools mover,restic,raw -rounds 5
//	go run ./bench/engines -datasets million-1KiB -restore=false
//
// With -engine archive it measures the archive engine instead (issue 13): the mover's backup
// against `tar -cf - . | PutObject` of the same tree, and against the mover of an earlier commit
// (-base-mover, interleaved), then both restores, each checked against the source:
//
//	git worktree add /tmp/base <commit> && (cd /tmp/base && CGO_ENABLED=0 go build -o /tmp/mover-base ./cmd/mover)
//	go run ./bench/engines -engine archive -base-mover /tmp/mover-base -datasets random-1MiB,small-4KiB
//
// The results are appended to -out (JSON) and printed as Markdown tables.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/okgoes/okgoes-operator/internal/mover"
)

const (
	bucket         = "bench"
	resticPassword = "bench-restic-password"
	kopiaPassword  = "bench-kopia-password"
)

type flags struct {
	scale      float64
	datasets   string
	workDir    string
	keep       bool
	mover      string
	minio      string
	restic     string
	kopia      string
	tools      string
	rounds     int
	withRestic bool
	restore    bool
	moverEnv   string
	engine     string
	baseMover  string
	baseLast   bool
	restoreDir string
	wrap       string
	out        string
	note       string
}

// run is the JSON record of one invocation.
type run struct {
	Date          time.Time        `json:"date"`
	Command       string           `json:"command"`
	Note          string           `json:"note,omitempty"`
	Scale         float64          `json:"scale"`
	MoverEnv      []string         `json:"moverEnv,omitempty"`
	ResticVersion string           `json:"resticVersion,omitempty"`
	KopiaVersion  string           `json:"kopiaCLIVersion,omitempty"`
	Tools         string           `json:"tools,omitempty"`
	Rounds        int              `json:"rounds,omitempty"`
	RestoreFS     string           `json:"restoreFS,omitempty"` // the file system of the restore targets
	GoVersion     string           `json:"goVersion"`
	CPUs          int              `json:"cpus"`
	Datasets      []datasetResults `json:"datasets"`
}

type datasetResults struct {
	Name      string                   `json:"name"`
	Files     int                      `json:"files"`
	Bytes     int64                    `json:"bytes"`
	Rewritten int                      `json:"rewrittenFiles"`
	Generate  float64                  `json:"generateSeconds"`
	Steps     map[string]measurement   `json:"steps"`            // tool/step, e.g. "mover/first-backup": medians of the rounds
	Rounds    []map[string]measurement `json:"rounds,omitempty"` // each round's steps
	Identical map[string]string        `json:"identical,omitempty"`
	Targets   []target                 `json:"targets"`
	Error     string                   `json:"error,omitempty"` // the run of the dataset stopped here
}

type target struct {
	What  string `json:"what"`
	Value string `json:"value"`
	Met   bool   `json:"met"`
}

func main() {
	var f flags
	flag.Float64Var(&f.scale, "scale", 1, "size of the datasets relative to the issues' (1 = source-tree 15,000 files, db-pages 1 GiB, vm-image 2 GiB, small-files 100,000 files, ...)")
	flag.StringVar(&f.datasets, "datasets", "source-tree,db-pages,vm-image,small-files,logs-append",
		"comma-separated datasets: source-tree, db-pages, vm-image, small-files, logs-append (issue 35); random-1MiB, small-4KiB, logs, million-1KiB (issue 12)")
	flag.IntVar(&f.rounds, "rounds", 3, "interleaved rounds per dataset, each on new repositories, the tools' order rotated by one per round")
	flag.StringVar(&f.tools, "tools", strings.Join(allTools, ","), "comma-separated tools: mover, restic, kopia-cli, raw (tar | PutObject, GetObject | tar -x)")
	flag.StringVar(&f.kopia, "kopia", "bin/kopia", "the stock kopia CLI (hack/tools/kopia/build.sh)")
	flag.StringVar(&f.workDir, "workdir", "", "directory for the datasets, restores, caches and MinIO's data (default: a new temporary directory)")
	flag.BoolVar(&f.keep, "keep", false, "keep the work directory")
	flag.StringVar(&f.mover, "mover", "", "mover binary, the program of the backup Jobs (default: ./cmd/mover built from this module with CGO_ENABLED=0)")
	flag.StringVar(&f.minio, "minio", "bin/minio", "MinIO server binary")
	flag.StringVar(&f.restic, "restic", "bin/restic-0.18.1", "restic binary (hack/tools/restic/build.sh)")
	flag.BoolVar(&f.withRestic, "with-restic", true, "run restic too")
	flag.BoolVar(&f.restore, "restore", true, "run the restores")
	flag.StringVar(&f.moverEnv, "mover-env", "", "comma-separated K=V added to the mover's environment (a knob to measure, e.g. GOMEMLIMIT=192MiB)")
	flag.StringVar(&f.engine, "engine", mover.EngineKopia, "mover engine to measure: kopia (against restic) or archive (against tar | PutObject, and -base-mover)")
	flag.StringVar(&f.baseMover, "base-mover", "", "with -engine archive: a second mover binary (e.g. of an earlier commit) measured interleaved with -mover")
	flag.BoolVar(&f.baseLast, "base-last", false, "run each step of -base-mover after the mover's instead of before (run both orders: a restore of many files is slower after the removal of another)")
	flag.StringVar(&f.restoreDir, "restore-dir", "", "directory for the restore targets, e.g. on a tmpfs to measure the tools without the disk, or on a file system with a journal (docs/benchmarks.md, \"Restore: where the time goes\") (default: the work directory)")
	flag.StringVar(&f.out, "out", filepath.Join("docs", "benchmarks", "engines-"+time.Now().UTC().Format("2006-01-02")+".json"), "JSON file the run is appended to")
	flag.StringVar(&f.wrap, "wrap-mover-restore", "", "a command the mover's restore runs under, to profile it (e.g. 'strace -f -c -o /tmp/restore.strace'): its times then include the wrapper's")
	flag.StringVar(&f.note, "note", "", "free text recorded with the run")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := benchmark(ctx, f); err != nil {
		log.Fatal(err)
	}
}

func benchmark(ctx context.Context, f flags) error {
	var all []dataset
	for _, d := range datasets(f.scale) {
		if slices.Contains(strings.Split(f.datasets, ","), d.name) {
			all = append(all, d)
		}
	}
	if len(all) == 0 {
		return fmt.Errorf("no dataset named in %q", f.datasets)
	}
	work := f.workDir
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "bench-engines-"); err != nil {
			return err
		}
	}
	if !f.keep {
		defer os.RemoveAll(work)
	}
	if f.mover == "" {
		f.mover = filepath.Join(work, "mover")
		log.Printf("building the mover into %s", f.mover)
		build := exec.Command("go", "build", "-o", f.mover, "./cmd/mover")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build the mover: %w", err)
		}
	}
	r := run{Date: time.Now().UTC(), Command: strings.Join(append([]string{"go run ./bench/engines"}, os.Args[1:]...), " "), Note: f.note, Scale: f.scale,
		GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Tools: f.tools, Rounds: f.rounds}
	if f.moverEnv != "" {
		r.MoverEnv = strings.Split(f.moverEnv, ",")
	}
	if f.engine != mover.EngineKopia && f.engine != mover.EngineArchive {
		return fmt.Errorf("-engine %q: kopia or archive", f.engine)
	}
	if f.engine == mover.EngineArchive {
		f.withRestic = false // the archive engine's yardsticks are tar | PutObject and -base-mover
	}
	for _, p := range []*string{&f.restic, &f.kopia, &f.mover, &f.baseMover} {
		if strings.Contains(*p, "/") { // the tools run in other directories
			if abs, err := filepath.Abs(*p); err == nil {
				*p = abs
			}
		}
	}
	for _, t := range strings.Split(f.tools, ",") {
		if !slices.Contains(allTools, t) {
			return fmt.Errorf("-tools: %q is none of %v", t, allTools)
		}
	}
	if f.rounds < 1 {
		return fmt.Errorf("-rounds %d: at least 1", f.rounds)
	}
	uses := func(t string) bool {
		return f.engine == mover.EngineKopia && slices.Contains(strings.Split(f.tools, ","), t)
	}
	if f.withRestic && uses(toolRestic) {
		v, err := exec.Command(f.restic, "version").Output()
		if err != nil {
			return fmt.Errorf("%s version: %w (hack/tools/restic/build.sh builds it)", f.restic, err)
		}
		r.ResticVersion = strings.TrimSpace(string(v))
	}
	if uses(toolKopiaCLI) {
		v, err := exec.Command(f.kopia, "--version").Output()
		if err != nil {
			return fmt.Errorf("%s --version: %w (hack/tools/kopia/build.sh builds it)", f.kopia, err)
		}
		r.KopiaVersion = strings.TrimSpace(string(v))
	}
	restoreDir := f.restoreDir
	if restoreDir == "" {
		restoreDir = work
	}
	var noJournal bool
	if r.RestoreFS, noJournal = restoreFS(restoreDir); noJournal {
		log.Printf("WARNING: the restores write to %s: a restore of many files after the removal of another tree "+
			"(every round removes some) costs several times the CPU there, whichever tool runs it; "+
			"-restore-dir on a file system with a journal measures the tools instead (docs/benchmarks.md)", r.RestoreFS)
	}
	earlier, err := earlierRuns(f.out)
	if err != nil {
		return err
	}
	s, err := startMinIO(f.minio, work)
	if err != nil {
		return err
	}
	defer s.stop()
	if err := s.client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		return err
	}
	for _, d := range all {
		b := &bench{f: f, s: s, work: work, d: d}
		res, err := b.run(ctx)
		if err != nil {
			res.Error = err.Error()
		}
		r.Datasets = append(r.Datasets, res)
		printMarkdown(os.Stdout, res)
		saveErr := saveRun(f.out, earlier, r) // before the slow removal of a million files
		os.RemoveAll(filepath.Join(work, d.name))
		if err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		if saveErr != nil {
			return saveErr
		}
	}
	return nil
}

// earlierRuns reads the JSON array of runs in path, if any.
func earlierRuns(path string) ([]run, error) {
	var runs []run
	if raw, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(raw, &runs); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return runs, nil
}

// saveRun writes the earlier runs and r (so far) into path.
func saveRun(path string, earlier []run, r run) error {
	runs := append(slices.Clip(earlier), r)
	raw, err := json.MarshalIndent(runs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	log.Printf("results written to %s", path)
	return os.WriteFile(path, append(raw, '\n'), 0o644)
}
