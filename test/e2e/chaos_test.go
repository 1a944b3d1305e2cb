//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The chaos stories of issue 36, on real pods: a RedisCache in Replication mode (3 pods, the
// defaults: failoverAfterSeconds 5, minReplicasToWrite 1, minReplicasMaxLagSeconds 5) loses its
// primary, which is hung (SIGSTOP of its redis-server for chaosFault), cut off from the pod
// network (iptables in its network namespace for chaosFault: the replicas, the operator and
// the client pod cannot reach it, the node can), or deleted. Four writers run through it:
//
//   - svc, svc+WAIT: in a client pod (on the replicas' side of a partition), a new connection
//     through the Service <name> per write (redis-cli, 2 s timeout), plain or followed by
//     WAIT 1 1000 (acknowledged only when a replica has it);
//   - open, open+WAIT: on the node (the old primary's side of a partition), one connection
//     through the Service kept open, replaced only on an error, READONLY or NOREPLICAS (as
//     docs/rediscache.md advises clients), 5 s timeout.
//
// Each story measures the write outage (the longest gap between acknowledged writes) and the
// acknowledged writes lost (acknowledged, but absent from the primary at the end), samples every
// pod's role from the node every 250 ms (time with two Redis servers reporting role:master, and
// with two that would take a write: master with enough good replicas), and asserts the bounds of
// docs/rediscache.md. The suite runs as root on the node: it signals the container's process and
// enters its network namespace from there.

const (
	chaosFault      = 30 * time.Second
	chaosBefore     = 5 * time.Second
	chaosAfter      = 25 * time.Second
	chaosInterval   = 50 * time.Millisecond
	chaosMaxLag     = 5 * time.Second  // minReplicasMaxLagSeconds, default
	chaosOutageMax  = 10 * time.Second // issue 36: the write outage through the Service
	chaosGuardSlack = 2 * time.Second  // Redis recounts its good replicas once a second
)

func TestRedisCacheChaosPrimaryHung(t *testing.T)     { chaosStory(t, "hung") }
func TestRedisCacheChaosPrimaryIsolated(t *testing.T) { chaosStory(t, "isolated") }
func TestRedisCacheChaosPrimaryDeleted(t *testing.T)  { chaosStory(t, "deleted") }

// write is one write of a writer: when it was answered (node uptime, seconds), its key, the answer.
type write struct {
	at     float64
	key    string
	acked  bool
	answer string
}

func chaosStory(t *testing.T, fault string) {
	ns := namespace(t, "e2e-chaos")
	rc := sample(t, "cache_v1beta1_rediscache.yaml")
	rc.SetNamespace(ns)
	rc.SetName("chaos")
	must(t, unstructured.SetNestedField(rc.Object, cfg.redisImage, "spec", "redis", "image"))
	must(t, unstructured.SetNestedField(rc.Object, "Replication", "spec", "mode"))
	must(t, unstructured.SetNestedField(rc.Object, int64(3), "spec", "replicas"))
	must(t, k8s.Create(ctx, rc))
	ready := waitForCache(t, rc, 3)
	primary := str(ready, "status", "replication", "primary")
	pods := podsOf(t, ns, map[string]string{"app.kubernetes.io/instance": "chaos"})
	ips := map[string]string{}
	var old *corev1.Pod
	for i := range pods {
		ips[pods[i].Name] = pods[i].Status.PodIP
		if pods[i].Name == primary {
			old = &pods[i]
		}
	}
	if old == nil {
		t.Fatalf("primary %q is not among the pods", primary)
	}
	svcIP := serviceIP(t, ns, "chaos")
	cli := redisClientPod(t, ns)
	svcAddr := net.JoinHostPort(svcIP, "6379")

	wctx, stopWriters := context.WithCancel(ctx)
	defer stopWriters()
	total := chaosBefore + chaosFault + chaosAfter
	var wg sync.WaitGroup
	logs := map[string]*[]write{}
	for _, name := range []string{"svc", "svc+WAIT", "open", "open+WAIT"} {
		logs[name] = &[]write{}
	}
	for _, name := range []string{"svc", "svc+WAIT"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			*logs[name] = podWriter(ns, cli, svcIP, name, total)
		}()
	}
	var nodeWriters sync.WaitGroup
	for _, name := range []string{"open", "open+WAIT"} {
		nodeWriters.Add(1)
		go func() {
			defer nodeWriters.Done()
			*logs[name] = openWriter(wctx, svcAddr, name)
		}()
	}
	roles := sampleRoles(wctx, ips)

	time.Sleep(chaosBefore)
	start := uptime()
	t.Logf("fault %s of the primary %s at uptime %.2f", fault, primary, start)
	switch fault {
	case "deleted":
		must(t, k8s.Delete(ctx, old))
	case "hung":
		pid := redisPID(t, old)
		must(t, syscall.Kill(pid, syscall.SIGSTOP))
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
		time.Sleep(chaosFault)
		must(t, syscall.Kill(pid, syscall.SIGCONT))
	case "isolated":
		heal := isolate(t, redisPID(t, old))
		t.Cleanup(heal)
		time.Sleep(chaosFault)
		heal()
	}
	t.Logf("fault over at uptime %.2f", uptime())
	wg.Wait() // the pod writers stop by themselves; stop the node's after the same time
	stopWriters()
	nodeWriters.Wait()
	samples := <-roles

	after := waitForCache(t, rc, 3)
	newPrimary := str(after, "status", "replication", "primary")
	if newPrimary == primary || newPrimary == "" {
		t.Fatalf("primary after the fault: %q (was %q)", newPrimary, primary)
	}
	if fault != "deleted" {
		// The former primary follows the new one (demoted as soon as it answered).
		eventually(t, primary+" demoted", time.Minute, func() (bool, string) {
			in := infoReplication(ips[primary], time.Second)
			return in["role"] == "slave" && in["master_host"] == ips[newPrimary], fmt.Sprint(in)
		})
	}
	rdb := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(ips[newPrimary], "6379"), DisableIdentity: true, Protocol: 2})
	defer rdb.Close()

	row := []string{fault}
	lostOpen, ackedOpen, rateOpen := 0, 0, 0.0
	for _, name := range []string{"svc", "svc+WAIT", "open", "open+WAIT"} {
		ws := *logs[name]
		lost, acked, lastLost := lostWrites(t, rdb, ws)
		gap := longestGap(ws)
		row = append(row, fmt.Sprintf("%.1f s", gap), fmt.Sprintf("%d of %d", lost, acked))
		if lost > 0 {
			t.Logf("%s: %d acknowledged writes lost, the last acknowledged %.1f s after the fault began", name, lost, lastLost-start)
		}
		switch {
		case strings.HasSuffix(name, "+WAIT") && lost > 0:
			t.Errorf("%s lost %d writes a replica had acknowledged (WAIT 1)", name, lost)
		case name == "svc" && time.Duration(gap*float64(time.Second)) > chaosOutageMax:
			t.Errorf("write outage through the Service %.1f s, more than %s", gap, chaosOutageMax)
		case name == "open":
			lostOpen, ackedOpen, rateOpen = lost, acked, rateBefore(ws, start)
			if lost > 0 && lastLost-start > (chaosMaxLag+chaosGuardSlack+time.Second).Seconds() {
				t.Errorf("open: a write acknowledged %.1f s after the fault began was lost; the write guard bounds that to min-replicas-max-lag + %s", lastLost-start, chaosGuardSlack)
			}
		}
	}
	// The bound of docs/rediscache.md: no more than the writes acknowledged within
	// min-replicas-max-lag (+ Redis's once-a-second recount, + 1 s of stamping) of the fault.
	if window := start + (chaosMaxLag + chaosGuardSlack + time.Second).Seconds(); lostOpen > ackedBetween(*logs["open"], start, window) {
		t.Errorf("open: %d of %d acknowledged writes lost, more than the %d it wrote within min-replicas-max-lag + %s of the fault (%.1f writes/s before it)",
			lostOpen, ackedOpen, ackedBetween(*logs["open"], start, window), chaosGuardSlack+time.Second, rateOpen)
	}
	masters, writable := twoMasters(samples)
	row = append(row, fmt.Sprintf("%.1f s", masters), fmt.Sprintf("%.1f s", writable))
	if writable > chaosMaxLag.Seconds() {
		t.Errorf("two Redis servers took writes for %.1f s, more than min-replicas-max-lag (%s)", writable, chaosMaxLag)
	}
	t.Logf("lastFailover: %v", after.Object["status"].(map[string]any)["replication"].(map[string]any)["lastFailover"])
	t.Logf("CHAOS | %s |", strings.Join(row, " | "))
	t.Logf("(columns: fault | outage svc | lost svc | outage svc+WAIT | lost svc+WAIT | outage open | lost open | outage open+WAIT | lost open+WAIT | two role:master | two writable masters)")
}

// podWriter runs the writer name in the client pod for d: one redis-cli (a new connection) per
// write through the Service at ip, each write stamped with the node's uptime (the pod shares the
// node's kernel).
func podWriter(ns, pod, ip, name string, d time.Duration) []write {
	prefix := strings.ReplaceAll(name, "+", "-")
	send := fmt.Sprintf(`timeout 2 redis-cli -h %s -p 6379 SET %s:$i 1`, ip, prefix)
	if strings.HasSuffix(name, "+WAIT") {
		send = fmt.Sprintf(`printf 'SET %s:%%d 1\r\nWAIT 1 1000\r\n' $i | timeout 3 redis-cli -h %s -p 6379`, prefix, ip)
	}
	script := fmt.Sprintf(`end=$(( $(cut -d. -f1 /proc/uptime) + %d )); i=0
		while [ $(cut -d. -f1 /proc/uptime) -lt $end ]; do
			r=$(%s 2>&1 | tr '\n ' '__'); [ -n "$r" ] || r=timeout; echo "$(cut -d' ' -f1 /proc/uptime) $i $r"; i=$((i+1)); sleep 0.05
		done`, int(d.Seconds()), send)
	out, _ := kubectl("-n", ns, "exec", pod, "--", "sh", "-c", script)
	var ws []write
	for _, l := range strings.Split(out, "\n") {
		var w write
		var i int
		if _, err := fmt.Sscanf(l, "%f %d %s", &w.at, &i, &w.answer); err != nil {
			continue
		}
		w.key = fmt.Sprintf("%s:%d", prefix, i)
		parts := strings.Split(strings.Trim(w.answer, "_"), "_")
		w.acked = parts[0] == "OK"
		if strings.HasSuffix(name, "+WAIT") {
			n, err := strconv.Atoi(parts[len(parts)-1])
			w.acked = w.acked && len(parts) == 2 && err == nil && n >= 1
		}
		ws = append(ws, w)
	}
	return ws
}

// openWriter writes through one connection to addr kept open until an error, a READONLY or a
// NOREPLICAS reply, then dials addr again; with "+WAIT" each SET is followed by WAIT 1 1000.
func openWriter(ctx context.Context, addr, name string) []write {
	prefix := strings.ReplaceAll(name, "+", "-")
	wait := strings.HasSuffix(name, "+WAIT")
	var ws []write
	var conn net.Conn
	var rd *bufio.Reader
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for i := 0; ctx.Err() == nil; i++ {
		w := write{key: fmt.Sprintf("%s:%d", prefix, i)}
		if conn == nil {
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				w.at, w.answer = uptime(), "dial:"+err.Error()
				ws = append(ws, w)
				time.Sleep(chaosInterval)
				continue
			}
			conn, rd = c, bufio.NewReader(c)
		}
		cmd := fmt.Sprintf("*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1\r\n1\r\n", len(w.key), w.key)
		if wait {
			cmd += "*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$4\r\n1000\r\n"
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		reply, err := "", error(nil)
		if _, err = conn.Write([]byte(cmd)); err == nil {
			reply, err = rd.ReadString('\n')
			if err == nil && wait {
				var n string
				if n, err = rd.ReadString('\n'); err == nil {
					reply += n
				}
			}
		}
		w.at = uptime()
		switch {
		case err != nil:
			w.answer = "error:" + err.Error()
		default:
			w.answer = strings.ReplaceAll(strings.TrimSpace(reply), "\r\n", "_")
			lines := strings.Split(strings.TrimSpace(reply), "\r\n")
			w.acked = lines[0] == "+OK"
			if wait {
				n, _ := strconv.Atoi(strings.TrimPrefix(lines[len(lines)-1], ":"))
				w.acked = w.acked && len(lines) == 2 && n >= 1
			}
		}
		ws = append(ws, w)
		if err != nil || strings.Contains(w.answer, "READONLY") || strings.Contains(w.answer, "NOREPLICAS") {
			conn.Close()
			conn = nil
		}
		time.Sleep(chaosInterval)
	}
	return ws
}

// lostWrites counts the acknowledged writes of ws whose key the primary does not have, and
// returns when the last of them was acknowledged.
func lostWrites(t *testing.T, rdb *redis.Client, ws []write) (lost, acked int, lastLost float64) {
	t.Helper()
	pipe := rdb.Pipeline()
	cmds := map[int]*redis.IntCmd{}
	for i, w := range ws {
		if w.acked {
			acked++
			cmds[i] = pipe.Exists(ctx, w.key)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && len(cmds) > 0 {
		t.Fatalf("reading back the acknowledged keys: %v", err)
	}
	for i, c := range cmds {
		if c.Val() == 0 {
			lost++
			lastLost = max(lastLost, ws[i].at)
		}
	}
	return lost, acked, lastLost
}

// longestGap is the longest time between two acknowledged writes (the write outage).
func longestGap(ws []write) float64 {
	gap, last := 0.0, -1.0
	for _, w := range ws {
		if !w.acked {
			continue
		}
		if last >= 0 {
			gap = max(gap, w.at-last)
		}
		last = w.at
	}
	return gap
}

// ackedBetween counts the acknowledged writes of ws answered between from and to.
func ackedBetween(ws []write, from, to float64) int {
	n := 0
	for _, w := range ws {
		if w.acked && w.at >= from && w.at <= to {
			n++
		}
	}
	return n
}

// rateBefore is the rate of acknowledged writes of ws before start.
func rateBefore(ws []write, start float64) float64 {
	n, first := 0, -1.0
	for _, w := range ws {
		if w.acked && w.at < start {
			if first < 0 {
				first = w.at
			}
			n++
		}
	}
	if n < 2 {
		return 0
	}
	return float64(n) / (start - first)
}

// roleSample is the roles the pods reported at one moment (node uptime).
type roleSample struct {
	at                float64
	masters, writable int
}

// sampleRoles asks every pod for INFO replication every 250 ms from the node until ctx ends.
func sampleRoles(ctx context.Context, ips map[string]string) <-chan []roleSample {
	out := make(chan []roleSample, 1)
	go func() {
		var samples []roleSample
		for ctx.Err() == nil {
			s := roleSample{at: uptime()}
			for _, ip := range ips {
				in := infoReplication(ip, 200*time.Millisecond)
				if in["role"] != "master" {
					continue
				}
				s.masters++
				// min_slaves_good_slaves is reported when the write guard is on.
				if g, ok := in["min_slaves_good_slaves"]; !ok || g != "0" {
					s.writable++
				}
			}
			samples = append(samples, s)
			time.Sleep(250 * time.Millisecond)
		}
		out <- samples
	}()
	return out
}

// twoMasters is how long at least two pods reported role:master, and how long two of them would
// have taken a write.
func twoMasters(samples []roleSample) (masters, writable float64) {
	for i := 1; i < len(samples); i++ {
		d := samples[i].at - samples[i-1].at
		if samples[i].masters >= 2 {
			masters += d
		}
		if samples[i].writable >= 2 {
			writable += d
		}
	}
	return masters, writable
}

// infoReplication is INFO replication of the Redis at ip, empty when it does not answer in time.
func infoReplication(ip string, timeout time.Duration) map[string]string {
	rdb := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(ip, "6379"), DisableIdentity: true, Protocol: 2, MaxRetries: -1,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, PoolSize: 1})
	defer rdb.Close()
	out, err := rdb.Info(ctx, "replication").Result()
	info := map[string]string{}
	if err != nil {
		return info
	}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			info[k] = v
		}
	}
	return info
}

// uptime is the node's /proc/uptime, the clock every writer stamps with.
func uptime() float64 {
	b, _ := os.ReadFile("/proc/uptime")
	f, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return f
}

// redisPID finds the redis-server of pod among the node's processes: its cgroup names the pod's
// UID (the kubelet's cgroupfs driver: .../pod<uid>/<container>).
func redisPID(t *testing.T, pod *corev1.Pod) int {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/comm")
	must(t, err)
	for _, p := range procs {
		comm, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(comm)) != "redis-server" {
			continue
		}
		dir := filepath.Dir(p)
		cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err != nil || !strings.Contains(string(cg), string(pod.UID)) && !strings.Contains(string(cg), strings.ReplaceAll(string(pod.UID), "-", "_")) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(dir))
		return pid
	}
	t.Fatalf("no redis-server process of pod %s (uid %s) on this node: the chaos stories need to run as root on the node", pod.Name, pod.UID)
	return 0
}

// isolate cuts the network namespace of pid off from the pod network, except from its gateway
// (the node): the replicas, the operator and the other pods no longer reach it, the node does.
// It returns the function that heals the partition (idempotent).
func isolate(t *testing.T, pid int) (heal func()) {
	t.Helper()
	ns := func(args ...string) (string, error) {
		out, err := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(pid), "-n"}, args...)...).CombinedOutput()
		return string(out), err
	}
	routes, err := ns("ip", "-4", "route")
	if err != nil {
		t.Fatalf("ip route in the pod's network namespace: %v\n%s", err, routes)
	}
	var gw, cidr string
	for _, l := range strings.Split(routes, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[0] == "default" && f[1] == "via":
			gw = f[2]
		case len(f) >= 1 && strings.Contains(f[0], "/") && !strings.HasPrefix(f[0], "10.96."):
			cidr = f[0]
		}
	}
	if gw == "" || cidr == "" {
		t.Fatalf("no default route or pod network in the pod's namespace:\n%s", routes)
	}
	// Inserted at the top in this order: the gateway's ACCEPT ends up above the pod network's DROP.
	rules := [][]string{
		{"INPUT", "-s", cidr, "-j", "DROP"},
		{"INPUT", "-s", gw, "-j", "ACCEPT"},
		{"OUTPUT", "-d", cidr, "-j", "DROP"},
		{"OUTPUT", "-d", gw, "-j", "ACCEPT"},
	}
	for _, r := range rules {
		if out, err := ns(append([]string{"iptables", "-I"}, r...)...); err != nil {
			t.Fatalf("iptables -I %v: %v\n%s", r, err, out)
		}
	}
	t.Logf("isolated the primary's network namespace (pid %d): drop %s but %s", pid, cidr, gw)
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, r := range rules {
				if out, err := ns(append([]string{"iptables", "-D"}, r...)...); err != nil {
					t.Errorf("iptables -D %v: %v\n%s", r, err, out)
				}
			}
		})
	}
}
