//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// customResources are the operator's kinds, for dumps.
const customResources = "rediscaches.cache.okgoes.com,pvcbackups.storage.okgoes.com,pvcrestores.storage.okgoes.com"

// dumpNamespace writes what is needed to understand a failure into the artifacts directory, and the
// short part (objects, events, the custom resources' status, the manager's log tail) into the test
// log.
func dumpNamespace(t *testing.T, ns string) {
	dir := filepath.Join(cfg.artifacts, strings.ReplaceAll(t.Name(), "/", "_"))
	_ = os.MkdirAll(dir, 0o755)
	section := func(file, title string, args ...string) string {
		out, err := kubectl(args...)
		if err != nil {
			out += "\n(" + err.Error() + ")"
		}
		_ = os.WriteFile(filepath.Join(dir, file), []byte(out), 0o644)
		return fmt.Sprintf("----- %s\n%s\n", title, out)
	}
	var short strings.Builder
	short.WriteString(section("objects.txt", "objects in "+ns,
		"-n", ns, "get", "all,pvc,configmaps,secrets,poddisruptionbudgets,"+customResources, "-o", "wide"))
	short.WriteString(section("events.txt", "events in "+ns, "-n", ns, "get", "events", "--sort-by=.lastTimestamp"))
	short.WriteString(section("custom-resources.yaml", "custom resources in "+ns, "-n", ns, "get", customResources, "-o", "yaml"))
	section("pods.txt", "pods", "-n", ns, "describe", "pods")
	section("jobs.txt", "jobs", "-n", ns, "describe", "jobs")
	section("pv.txt", "persistent volumes", "get", "pv", "-o", "wide")
	if pods, err := kubectl("-n", ns, "get", "pods", "-o", "name"); err == nil {
		for _, pod := range strings.Fields(pods) {
			name := strings.TrimPrefix(pod, "pod/")
			section("log-"+name+".txt", "log of "+name, "-n", ns, "logs", pod, "--all-containers", "--prefix")
		}
	}
	var op strings.Builder
	dumpOperator(&op)
	_ = os.WriteFile(filepath.Join(dir, "operator.txt"), []byte(op.String()), 0o644)
	tail := op.String()
	if lines := strings.Split(tail, "\n"); len(lines) > 120 {
		tail = strings.Join(lines[len(lines)-120:], "\n")
	}
	short.WriteString("----- operator (last lines)\n" + tail)
	t.Logf("failure dump (full dump in %s):\n%s", dir, short.String())
}

// dumpOperator writes the manager's Deployment, pods, events and log.
func dumpOperator(w io.Writer) {
	for _, args := range [][]string{
		{"get", "nodes", "-o", "wide"},
		{"-n", cfg.operatorNS, "get", "all,leases", "-o", "wide"},
		{"-n", cfg.operatorNS, "get", "events", "--sort-by=.lastTimestamp"},
		{"-n", cfg.operatorNS, "describe", "pods", "-l", cfg.managerSelector},
		{"-n", cfg.operatorNS, "logs", "-l", cfg.managerSelector, "--tail=-1", "--all-containers"},
	} {
		out, err := kubectl(args...)
		fmt.Fprintf(w, "----- kubectl %s\n%s\n", strings.Join(args, " "), out)
		if err != nil {
			fmt.Fprintf(w, "(%v)\n", err)
		}
	}
}
