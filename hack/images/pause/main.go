//go:build linux

// Command pause is the sandbox ("pause") image of the local cluster (hack/local-cluster.sh): it holds
// a pod's namespaces open, reaps the zombies a shared PID namespace hands it, and exits on SIGINT or
// SIGTERM, like registry.k8s.io/pause. It is a static Go binary so that the image is one file and no
// registry is needed.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for { // reap every exited child; WNOHANG so that a live child does not block us
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
