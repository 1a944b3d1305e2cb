//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// customResources are the operator's kinds, for dumps.
const customResources = "rediscaches.cache.okgoes.com,pvcbackups.storage.okgoes.com,pvcrestores.storage.okgoes.com"

// dumpNamespace writes what is needed to understand a failure into the artifacts directory, and the
// short part (objects, events, the custom resources' status, the manager's log tail) into the test
// log.
func dumpNamespace(t *testing.T, ns string) {
	dumpNamespaceObjects(t, ns)
	t.Log(clusterBrief())
}

// dumpNamespaceObjects is dumpNamespace without the cluster brief, for a caller that dumps several
// namespaces and ends with the brief once.
func dumpNamespaceObjects(t *testing.T, ns string) {
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

// clusterBrief is the last thing a failure dump prints (CI shows the end of the output): the
// node's conditions and taints, the free space where the cluster keeps its state, every pod that
// is not running and ready with its containers' reasons, and the latest warning events.
func clusterBrief() string {
	var b strings.Builder
	b.WriteString("----- cluster brief\n")
	var nodes corev1.NodeList
	if err := k8s.List(ctx, &nodes); err != nil {
		fmt.Fprintf(&b, "nodes: %v\n", err)
	}
	for _, n := range nodes.Items {
		var conds []string
		for _, c := range n.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s", c.Type, c.Status))
		}
		var taints []string
		for _, t := range n.Spec.Taints {
			taints = append(taints, t.Key+":"+string(t.Effect))
		}
		fmt.Fprintf(&b, "node %s: %s; taints [%s]\n", n.Name, strings.Join(conds, " "), strings.Join(taints, " "))
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(cfg.root, &fs); err == nil {
		fmt.Fprintf(&b, "free space under %s: %d MiB of %d MiB\n", cfg.root,
			fs.Bavail*uint64(fs.Bsize)>>20, fs.Blocks*uint64(fs.Bsize)>>20)
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods); err != nil {
		fmt.Fprintf(&b, "pods: %v\n", err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || podReady(&p) {
			continue
		}
		fmt.Fprintf(&b, "pod %s/%s on %q: %s %s %s", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase,
			p.Status.Reason, p.Status.Message)
		for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			switch {
			case c.State.Waiting != nil:
				fmt.Fprintf(&b, "; %s waiting %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
			case c.State.Terminated != nil:
				fmt.Fprintf(&b, "; %s terminated %s (exit %d) %s", c.Name, c.State.Terminated.Reason,
					c.State.Terminated.ExitCode, c.State.Terminated.Message)
			default:
				fmt.Fprintf(&b, "; %s running, ready=%t, restarts %d", c.Name, c.Ready, c.RestartCount)
			}
		}
		b.WriteString("\n")
	}
	var events corev1.EventList
	if err := k8s.List(ctx, &events); err != nil {
		fmt.Fprintf(&b, "events: %v\n", err)
	}
	var warnings []corev1.Event
	for _, e := range events.Items {
		if e.Type == corev1.EventTypeWarning {
			warnings = append(warnings, e)
		}
	}
	last := func(e corev1.Event) time.Time {
		if !e.LastTimestamp.IsZero() {
			return e.LastTimestamp.Time
		}
		return e.EventTime.Time
	}
	sort.SliceStable(warnings, func(i, j int) bool { return last(warnings[i]).Before(last(warnings[j])) })
	if len(warnings) > 15 {
		warnings = warnings[len(warnings)-15:]
	}
	for _, e := range warnings {
		fmt.Fprintf(&b, "warning %s %s/%s %s (x%d): %s\n", last(e).Format(time.TimeOnly), e.InvolvedObject.Namespace,
			e.InvolvedObject.Name, e.Reason, max(e.Count, 1), e.Message)
	}
	return b.String()
}
