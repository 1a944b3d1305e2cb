// Command scale measures the manager at scale (issue 13): its own kube-apiserver + etcd (bin/k8s)
// with an audit log, a real MinIO (bin/minio) behind a proxy that counts S3 calls, and the
// manager as a separate process (built from this checkout unless -manager names a binary). It
// creates N objects of each kind and reports, from the audit log and the manager's metrics:
// API requests and writes per object (by verb), S3 calls, time to converge, reconciles/s and
// requests/s at rest, the manager's RSS (also with unrelated ConfigMaps added), and the schedule
// lag of PVCBackups due in the same minute (audit time of each Job's create minus the minute).
//
//	go run ./bench/scale                       # a quick run (a few minutes)
//	go run ./bench/scale -backups 10000 -caches 1000 -foreign 10000 -scheduled 1000
//
// No kube-controller-manager or kubelet runs: Jobs never start and Deployments never become
// ready, which is exactly the "not Ready at rest" and "active run" load the issue describes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

type flags struct {
	backups, caches, foreign, scheduled int
	rest                                time.Duration
	manager, assets, minio, crds, work  string
	managerArgs                         string
	keep                                bool
}

func main() {
	var f flags
	flag.IntVar(&f.backups, "backups", 1000, "PVCBackups (each with its PVC) present when the manager starts: the initial sync")
	flag.IntVar(&f.caches, "caches", 300, "RedisCaches created while the manager runs (never Ready: no kubelet)")
	flag.IntVar(&f.foreign, "foreign", 2000, "unrelated ConfigMaps added at the end, to see whether the manager's memory follows them")
	flag.IntVar(&f.scheduled, "scheduled", 300, "PVCBackups due in the same minute: the schedule lag")
	flag.DurationVar(&f.rest, "rest", 30*time.Second, "length of each at-rest measurement window")
	flag.StringVar(&f.manager, "manager", "", "manager binary (default: go build . into the work directory)")
	flag.StringVar(&f.managerArgs, "manager-args", "", "extra manager flags, space-separated")
	flag.StringVar(&f.assets, "assets", envOr("KUBEBUILDER_ASSETS", "bin/k8s"), "directory with kube-apiserver and etcd")
	flag.StringVar(&f.minio, "minio", "bin/minio", "MinIO server binary")
	flag.StringVar(&f.crds, "crds", "config/crd/bases", "CRD directory")
	flag.StringVar(&f.work, "work", "", "work directory (default: a new temporary directory, removed unless -keep)")
	flag.BoolVar(&f.keep, "keep", false, "keep the work directory (audit log, manager log)")
	flag.Parse()
	if err := run(f); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(f flags) error {
	ctrllog.SetLogger(logr.Discard())
	ctx := context.Background()
	if f.work == "" {
		dir, err := os.MkdirTemp("", "okgoes-scale-")
		if err != nil {
			return err
		}
		f.work = dir
	}
	if !f.keep {
		defer os.RemoveAll(f.work)
	} else {
		fmt.Fprintln(os.Stderr, "work directory:", f.work)
	}
	if f.manager == "" {
		f.manager = filepath.Join(f.work, "manager")
		progress("building the manager")
		cmd := exec.Command("go", "build", "-o", f.manager, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build: %w", err)
		}
	}
	progress("starting kube-apiserver + etcd with an audit log, and MinIO")
	cp, err := startControlPlane(f.assets, f.crds, f.work)
	if err != nil {
		return err
	}
	defer cp.stop()
	onSignal(cp.stop)
	s3, err := startMinIO(f.minio, f.work)
	if err != nil {
		return err
	}
	defer s3.stop()
	onSignal(s3.stop)
	h, err := newHarness(cp, s3)
	if err != nil {
		return err
	}
	if err := h.setup(ctx); err != nil {
		return err
	}
	rep := &report{flags: f, start: time.Now()}

	progress(fmt.Sprintf("creating %d PVCs and %d PVCBackups before the manager starts", f.backups, f.backups))
	if err := h.createBackups(ctx, nsBackups, f.backups, "0 0 1 1 *"); err != nil {
		return err
	}
	mgr, err := startManager(f.manager, cp.kubeconfig, nsSystem, f.work, strings.Fields(f.managerArgs))
	if err != nil {
		return err
	}
	defer mgr.stop()
	onSignal(mgr.stop)
	h.mgr = mgr
	if rep.initialSync, err = h.measureConvergence(ctx, "initial sync", f.backups, time.Now(), 15*time.Minute,
		func(ctx context.Context) (int, error) { return h.convergedBackups(ctx, nsBackups) }); err != nil {
		return err
	}
	if f.backups > 0 {
		if rep.restBackups, err = h.measureRest(ctx, "at rest, PVCBackups", f.rest, f.backups); err != nil {
			return err
		}
	}

	if f.caches > 0 {
		progress(fmt.Sprintf("creating %d RedisCaches", f.caches))
		t0 := time.Now()
		if err := h.createCaches(ctx, f.caches); err != nil {
			return err
		}
		if rep.caches, err = h.measureConvergence(ctx, "RedisCaches", f.caches, t0, 15*time.Minute, h.convergedCaches); err != nil {
			return err
		}
		if rep.restCaches, err = h.measureRest(ctx, "at rest, RedisCaches not Ready", f.rest, f.caches); err != nil {
			return err
		}
	}

	if f.scheduled > 0 {
		if rep.schedule, err = h.measureSchedule(ctx, f.scheduled); err != nil {
			return err
		}
		if rep.restActive, err = h.measureRest(ctx, "at rest, active runs", f.rest, f.scheduled); err != nil {
			return err
		}
	}

	if f.foreign > 0 {
		progress(fmt.Sprintf("adding %d unrelated ConfigMaps", f.foreign))
		if rep.foreign, err = h.measureForeign(ctx, f.foreign, f.rest); err != nil {
			return err
		}
	}
	rep.print(os.Stdout)
	return nil
}

var (
	cleanupMu sync.Mutex
	cleanups  []func()
	watching  sync.Once
)

// onSignal runs stop (after the stops registered later) when SIGINT or SIGTERM ends the run:
// no API server, etcd, MinIO or manager outlives the harness.
func onSignal(stop func()) {
	cleanupMu.Lock()
	cleanups = append(cleanups, stop)
	cleanupMu.Unlock()
	watching.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
		go func() {
			<-ch
			cleanupMu.Lock()
			for i := len(cleanups) - 1; i >= 0; i-- {
				cleanups[i]()
			}
			os.Exit(1)
		}()
	})
}

func progress(msg string) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().UTC().Format("15:04:05"), msg)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
