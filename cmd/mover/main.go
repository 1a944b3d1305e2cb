// Command mover is the program of the backup, restore, verify and list Jobs
// (`/mover backup|restore|verify|list`), configured only through its environment (internal/mover
// lists the variables; internal/mover/run runs the command). It is a binary of its own, beside
// /manager in the operator's image, because it starts once per run: it links none of the
// Kubernetes client libraries, whose package initialisation alone took 0.18 s of CPU and 48 MiB
// of memory in every run when the mover was `manager mover`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/mover/run"
)

// version is set at build time (-ldflags "-X main.version=...") and recorded in backup manifests.
var version = "dev"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: mover backup|restore|verify|list (configured by the environment)")
		os.Exit(2)
	}
	os.Exit(runCommand(os.Args[1]))
}

// runCommand runs a mover command. SIGTERM (the Job's activeDeadlineSeconds, an eviction, a
// deletion) cancels it, so that it aborts its upload and reports Interrupted before the
// kubelet's SIGKILL.
func runCommand(command string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	run.SetGCPercent(os.Getenv)
	run.SetMemoryLimit(os.Getenv)
	run.UseTempDir(os.Getenv(mover.EnvKopiaCacheDir))
	var res mover.Result
	switch command {
	case "backup":
		res = run.Backup(ctx, os.Getenv, version)
	case "restore":
		res = run.Restore(ctx, os.Getenv)
	case "verify":
		res = run.Verify(ctx, os.Getenv)
	case "list":
		res = run.List(ctx, os.Getenv)
	default:
		fmt.Fprintf(os.Stderr, "mover: unknown command %q (backup, restore, verify, list)\n", command)
		return 2
	}
	if !res.Succeeded() {
		fmt.Fprintln(os.Stderr, "mover:", res.Message)
		return 1
	}
	return 0
}
