//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestRedisCacheReplicationFailsOver runs a RedisCache in Replication mode on real pods: writes
// through the Service <name> reach the primary and are read back through <name>-replicas (which
// refuses writes); deleting the primary's pod promotes a replica, and writes through <name>
// succeed again within a measured time with every write the replicas had acknowledged (WAIT)
// still there; exactly one pod is labelled primary, and the replacement pod joins as a replica.
func TestRedisCacheReplicationFailsOver(t *testing.T) {
	alongside(t)
	ns := namespace(t, "e2e-repl")
	rc := sample(t, "cache_v1beta1_rediscache.yaml")
	rc.SetNamespace(ns)
	rc.SetName("repl")
	must(t, unstructured.SetNestedField(rc.Object, cfg.redisImage, "spec", "redis", "image"))
	must(t, unstructured.SetNestedField(rc.Object, "Replication", "spec", "mode"))
	must(t, unstructured.SetNestedField(rc.Object, int64(3), "spec", "replicas"))
	must(t, unstructured.SetNestedField(rc.Object, int64(5), "spec", "replication", "failoverAfterSeconds"))
	must(t, k8s.Create(ctx, rc))
	ready := waitForCache(t, rc, 3)
	primary := str(ready, "status", "replication", "primary")
	if primary == "" {
		t.Fatalf("no primary in the status of a Ready cache:\n%s", statusJSON(ready))
	}
	writeIP, readIP := serviceIP(t, ns, "repl"), serviceIP(t, ns, "repl-replicas")
	cli := redisClientPod(t, ns)
	redisCLI := func(script string) (string, error) {
		return kubectl("-n", ns, "exec", cli, "--", "sh", "-c", script)
	}

	// 100 keys through <name>, acknowledged by both replicas (WAIT 2) before the test goes on.
	msetAcknowledged(t, redisCLI, writeIP, 2)
	for range 5 { // several connections: the Service spreads them over both replicas
		if out, err := redisCLI(fmt.Sprintf("redis-cli -h %s -p 6379 GET k99", readIP)); err != nil || strings.TrimSpace(out) != "v99" {
			t.Fatalf("GET k99 through repl-replicas: %v %q", err, out)
		}
	}
	if out, _ := redisCLI(fmt.Sprintf("redis-cli -h %s -p 6379 SET x y", readIP)); !strings.Contains(out, "READONLY") {
		t.Errorf("a write through repl-replicas was not refused: %q", out)
	}

	// A writer in the client pod sets a key through <name> every ~50 ms for 25 s and stamps each
	// answer with the pod's uptime (1/100 s); 5 s in, the primary's pod is deleted. The outage is
	// the time between the last write that succeeded before the first failure and the first one
	// that succeeded after it. Each write gives up after 2 s, as a client with a connect timeout
	// does: a SYN sent to the deleted pod's address while kube-proxy still routes the Service there
	// is otherwise retried by the kernel for two minutes (seen in CI: an "outage" of 2m14s with 3
	// failed writes, the operator having failed over at once).
	writer := make(chan string, 1)
	go func() {
		out, _ := redisCLI(fmt.Sprintf(`end=$(( $(cut -d. -f1 /proc/uptime) + 25 )); i=0
			while [ $(cut -d. -f1 /proc/uptime) -lt $end ]; do
				r=$(timeout 2 redis-cli -h %s -p 6379 SET w $i 2>&1 | tr ' ' _); [ -n "$r" ] || r=timeout; echo "$(cut -d' ' -f1 /proc/uptime) $r"; i=$((i+1)); sleep 0.05
			done`, writeIP))
		writer <- out
	}()
	time.Sleep(5 * time.Second)
	must(t, k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: primary}}))
	lines := strings.Split(strings.TrimSpace(<-writer), "\n")
	lastOK, firstFail, firstOKAfter, fails := -1.0, -1.0, -1.0, 0
	for _, l := range lines {
		var at float64
		var answer string
		if _, err := fmt.Sscanf(l, "%f %s", &at, &answer); err != nil {
			continue
		}
		switch {
		case answer == "OK" && firstFail < 0:
			lastOK = at
		case answer != "OK":
			fails++
			if firstFail < 0 {
				firstFail = at
				t.Logf("first failed write: %s", l)
			}
		case firstOKAfter < 0:
			firstOKAfter = at
		}
	}
	if lastOK >= 0 && firstFail < 0 {
		firstFail, firstOKAfter = lastOK, lastOK // no write failed at all: no outage to measure
	}
	if lastOK < 0 || firstOKAfter < 0 {
		t.Fatalf("writer saw no outage and recovery (last OK %v, first failure %v, first OK after %v): %d lines\n%s",
			lastOK, firstFail, firstOKAfter, len(lines), strings.Join(lines, "\n"))
	}
	outage := time.Duration((firstOKAfter - lastOK) * float64(time.Second))
	t.Logf("MEASURED: writes through the Service repl failed for %s after the primary pod %s was deleted (%d of %d writes failed)",
		outage.Round(10*time.Millisecond), primary, fails, len(lines))
	if outage > 30*time.Second {
		t.Errorf("failover took %s, more than the 30 s bound docs/rediscache.md states", outage)
	}

	after := waitForCache(t, rc, 3)
	newPrimary := str(after, "status", "replication", "primary")
	if newPrimary == primary || newPrimary == "" {
		t.Fatalf("primary after the failover: %q (was %q)", newPrimary, primary)
	}
	t.Logf("lastFailover: %v", after.Object["status"].(map[string]any)["replication"].(map[string]any)["lastFailover"])
	if out, err := redisCLI(fmt.Sprintf("redis-cli -h %s -p 6379 DBSIZE", writeIP)); err != nil || strings.TrimSpace(out) != "101" {
		t.Errorf("keys on the new primary: %v %q, want the 100 acknowledged + the writer's", err, out)
	}
	labelled := podsOf(t, ns, map[string]string{"app.kubernetes.io/instance": "repl", "cache.okgoes.com/role": "primary"})
	if len(labelled) != 1 || labelled[0].Name != newPrimary {
		names := []string{}
		for _, p := range labelled {
			names = append(names, p.Name)
		}
		t.Errorf("pods labelled primary: %v, want only %s", names, newPrimary)
	}
	// The replacement of the deleted pod (same name, booted fenced) follows the new primary.
	np := &corev1.Pod{}
	must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: newPrimary}, np))
	if got := redisReplication(t, ns, primary); got["role"] != "slave" || got["master_host"] != np.Status.PodIP || got["master_link_status"] != "up" {
		t.Errorf("the replacement pod %s: %v, want a linked replica of %s (%s)", primary, got, newPrimary, np.Status.PodIP)
	}

	// Scale 3 -> 5 -> 1 -> 3: the data stays, whichever pod is the primary; at 1 the primary is
	// repl-0 (a primary with a higher ordinal hands over first).
	keys, _ := redisCLI(fmt.Sprintf("redis-cli -h %s -p 6379 DBSIZE", writeIP))
	for _, n := range []int64{5, 1, 3} {
		patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
		must(t, k8s.Patch(ctx, rc, client.RawPatch("application/merge-patch+json", []byte(patch))))
		start := time.Now()
		scaled := waitForCache(t, rc, int(n))
		p := str(scaled, "status", "replication", "primary")
		t.Logf("MEASURED: scaled to %d in %s, primary %s", n, time.Since(start).Round(100*time.Millisecond), p)
		if n == 1 && p != "repl-0" {
			t.Errorf("primary at 1 replica: %s, want repl-0", p)
		}
		if out, err := redisCLI(fmt.Sprintf("redis-cli -h %s -p 6379 DBSIZE", writeIP)); err != nil || out != keys {
			t.Errorf("keys through repl at %d replicas: %v %q, want %q", n, err, out, keys)
		}
		if n > 1 {
			// A replica joins <name>-replicas once it is in sync: new pods of a scale-up may take
			// a few seconds after the cache is Ready.
			var out string
			var err error
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
				out, err = redisCLI(fmt.Sprintf("timeout 2 redis-cli -h %s -p 6379 GET k42", readIP))
				if (err == nil && strings.TrimSpace(out) == "v42") || time.Now().After(deadline) {
					break
				}
			}
			if err != nil || strings.TrimSpace(out) != "v42" {
				t.Errorf("GET k42 through repl-replicas at %d replicas, for 30 s: %v %q", n, err, out)
			}
		}
	}
}

// msetAcknowledged writes k0..k99 = v0..v99 through the Service at ip with one MSET and waits
// until replicas replicas acknowledged it (WAIT).
func msetAcknowledged(t *testing.T, redisCLI func(string) (string, error), ip string, replicas int) {
	t.Helper()
	var mset strings.Builder
	for i := range 100 {
		fmt.Fprintf(&mset, " k%d v%d", i, i)
	}
	out, err := redisCLI(fmt.Sprintf("printf 'MSET%s\\nWAIT %d 10000\\n' | redis-cli -h %s -p 6379", mset.String(), replicas, ip))
	if err != nil || !strings.Contains(out, "OK") || strings.TrimSpace(out[strings.LastIndex(out, "OK")+2:]) != fmt.Sprint(replicas) {
		t.Fatalf("MSET + WAIT %d through %s: %v\n%s", replicas, ip, err, out)
	}
}

func serviceIP(t *testing.T, ns, name string) string {
	t.Helper()
	svc := &corev1.Service{}
	must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc))
	return svc.Spec.ClusterIP
}

// redisClientPod starts a pod of the Redis image that only sleeps: the suite runs redis-cli in it.
func redisClientPod(t *testing.T, ns string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "redis-client"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			AutomountServiceAccountToken:  ptr.To(false),
			Containers: []corev1.Container{{
				Name: "main", Image: cfg.redisImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", "sleep 3600"},
			}},
		},
	}
	must(t, k8s.Create(ctx, pod))
	eventually(t, "pod redis-client running", 2*time.Minute, func() (bool, string) {
		got := &corev1.Pod{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == corev1.PodRunning, string(got.Status.Phase)
	})
	return pod.Name
}

// redisReplication is INFO replication of the Redis in pod, as key/value pairs.
func redisReplication(t *testing.T, ns, pod string) map[string]string {
	t.Helper()
	info := map[string]string{}
	eventually(t, "Redis in "+pod+" answers", 2*time.Minute, func() (bool, string) {
		out, err := kubectl("-n", ns, "exec", pod, "-c", "redis", "--", "redis-cli", "INFO", "replication")
		if err != nil {
			return false, out
		}
		for _, l := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
				info[k] = v
			}
		}
		return info["role"] != "", out
	})
	return info
}

// TestRedisCacheReplicationRotatesPassword rotates the password of a Replication cache on real
// pods: with the old one kept under "password.previous" both work, after it is removed only the new
// one; no pod restarts, and the pods stay ready once the kubelet refreshed the mounted Secret
// (the readiness probe reads it).
func TestRedisCacheReplicationRotatesPassword(t *testing.T) {
	alongside(t)
	ns := namespace(t, "e2e-rot")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rot-auth"}, StringData: map[string]string{"password": "one"}}
	must(t, k8s.Create(ctx, secret))
	rc := sample(t, "cache_v1beta1_rediscache.yaml")
	rc.SetNamespace(ns)
	rc.SetName("rot")
	must(t, unstructured.SetNestedField(rc.Object, cfg.redisImage, "spec", "redis", "image"))
	must(t, unstructured.SetNestedField(rc.Object, "Replication", "spec", "mode"))
	must(t, unstructured.SetNestedField(rc.Object, int64(2), "spec", "replicas"))
	must(t, unstructured.SetNestedMap(rc.Object, map[string]any{"secretRef": map[string]any{"name": "rot-auth"}}, "spec", "redis", "auth"))
	must(t, k8s.Create(ctx, rc))
	waitForCache(t, rc, 2)
	instance := map[string]string{"app.kubernetes.io/instance": "rot"}
	before := map[string]string{}
	for _, p := range redisPods(t, ns, instance) {
		before[p.Name] = fmt.Sprintf("%s/%d", p.UID, p.Status.ContainerStatuses[0].RestartCount)
	}
	ping := func(pod, password string) string {
		out, _ := kubectl("-n", ns, "exec", pod, "-c", "redis", "--", "sh", "-c",
			fmt.Sprintf("REDISCLI_AUTH=%s redis-cli ping 2>&1", password))
		return strings.TrimSpace(out)
	}
	setSecret := func(data map[string]string) {
		s := &corev1.Secret{}
		must(t, k8s.Get(ctx, client.ObjectKeyFromObject(secret), s))
		s.Data, s.StringData = nil, data
		must(t, k8s.Update(ctx, s))
	}

	start := time.Now()
	setSecret(map[string]string{"password": "two", "password.previous": "one"})
	eventually(t, "both passwords accepted by every pod", 2*time.Minute, func() (bool, string) {
		state := []string{}
		for name := range before {
			state = append(state, fmt.Sprintf("%s: two=%s one=%s", name, ping(name, "two"), ping(name, "one")))
		}
		ok := true
		for _, s := range state {
			ok = ok && strings.Count(s, "PONG") == 2
		}
		return ok, strings.Join(state, "; ")
	})
	t.Logf("MEASURED: new password accepted by every pod %s after the Secret changed", time.Since(start).Round(time.Second))

	start = time.Now()
	setSecret(map[string]string{"password": "two"})
	eventually(t, "only the new password accepted", 2*time.Minute, func() (bool, string) {
		state := []string{}
		ok := true
		for name := range before {
			two, one := ping(name, "two"), ping(name, "one")
			ok = ok && two == "PONG" && strings.Contains(one, "WRONGPASS")
			state = append(state, fmt.Sprintf("%s: two=%s one=%s", name, two, one))
		}
		return ok, strings.Join(state, "; ")
	})
	t.Logf("MEASURED: old password refused %s after it was removed from the Secret", time.Since(start).Round(time.Second))

	// The readiness probe reads the mounted Secret (its "password" key only): once the kubelet
	// refreshed it (at its next sync of the pod, up to about a minute and a half after the first
	// change), the pods must be ready with the new password, and none restarted.
	eventually(t, "the kubelet refreshed the mounted Secret in every pod", 3*time.Minute, func() (bool, string) {
		state := []string{}
		ok := true
		for name := range before {
			out, _ := kubectl("-n", ns, "exec", name, "-c", "redis", "--", "cat", "/etc/redis-auth/password")
			ok = ok && strings.TrimSpace(out) == "two"
			state = append(state, fmt.Sprintf("%s: %q", name, out))
		}
		return ok, strings.Join(state, "; ")
	})
	t.Logf("MEASURED: the kubelet refreshed the mounted Secret in every pod %s after the last change of the Secret", time.Since(start).Round(time.Second))
	waitForCache(t, rc, 2)
	for _, p := range redisPods(t, ns, instance) {
		if got := fmt.Sprintf("%s/%d", p.UID, p.Status.ContainerStatuses[0].RestartCount); got != before[p.Name] {
			t.Errorf("pod %s: uid/restarts %s, before the rotation %s", p.Name, got, before[p.Name])
		}
	}
}
