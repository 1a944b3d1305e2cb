package cache

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	"github.com/okgoes/okgoes-operator/internal/redisadmin"
)

// The failover stories of issue 36: a primary that hangs or is cut off is found by the operator
// within seconds (no kubelet plays its readiness here: the pods stay Ready, as a partitioned pod
// does), a primary cut off from its replicas stops taking writes, and a former primary is demoted
// and its clients disconnected as soon as it answers again.

// hungPrimaryBound is what docs/rediscache.md promises for a hung primary with the default
// failoverAfterSeconds (5): the operator's PING (1 s apart, 1 s timeout), the 5 s, and the
// promotion; the rest is the test's own polling and a loaded machine.
const hungPrimaryBound = 12 * time.Second

// TestReplicationFailsOverAHungPrimaryWithinSeconds: the primary's Redis freezes (SIGSTOP) while
// its pod stays Ready. With the default failoverAfterSeconds the operator's own PING finds it and a
// replica is promoted within hungPrimaryBound, not at the next 30 s resync.
func TestReplicationFailsOverAHungPrimaryWithinSeconds(t *testing.T) {
	ns := newNamespace(t)
	rc := replicationCache(ns, "hung", 3, 0)
	rc.Spec.Replication = &cachev1beta1.Replication{} // the CRD's defaults
	procs, _ := startReplicationCache(t, rc)
	waitForPrimary(t, rc, "hung-0")
	if after := getCache(t, rc).Spec.Replication.FailoverAfterSeconds; after == nil || *after != 5 {
		t.Fatalf("failoverAfterSeconds defaults to %v, want 5", after)
	}
	stop := watchPrimaries(t, rc)
	defer stop()

	procs[0].freeze()
	start := time.Now()
	var promoted string
	eventually(t, hungPrimaryBound, func() error {
		got := getCache(t, rc)
		if r := got.Status.Replication; r != nil && r.Primary != "hung-0" && r.Primary != "" &&
			meta.IsStatusConditionTrue(got.Status.Conditions, cachev1beta1.ConditionPrimaryAvailable) {
			promoted = r.Primary
			return nil
		}
		return fmt.Errorf("primary %+v, conditions %+v", got.Status.Replication, got.Status.Conditions)
	})
	t.Logf("%s promoted %v after the primary froze (its pod Ready throughout)", promoted, time.Since(start).Round(time.Millisecond))
	if f := getCache(t, rc).Status.Replication.LastFailover; f == nil || f.Reason != ReasonPrimaryUnavailable || f.From != "hung-0" {
		t.Errorf("lastFailover = %+v", f)
	}
	if p := primaries(t, rc); len(p) != 1 || p[0] != promoted {
		t.Errorf("pods labelled primary: %v, want %s", p, promoted)
	}
}

// TestReplicationPrimaryCutOffFromItsReplicasRefusesWrites: the primary gets the write guard of the
// spec (min-replicas-to-write 1 by default, min-replicas-max-lag as asked); when both replicas go
// silent (frozen: to the primary a partition looks the same) it refuses writes with NOREPLICAS
// after about min-replicas-max-lag seconds, and takes them again when a replica is back.
func TestReplicationPrimaryCutOffFromItsReplicasRefusesWrites(t *testing.T) {
	ns := newNamespace(t)
	rc := replicationCache(ns, "guard", 3, 3600) // no failover: the primary stays, alone
	rc.Spec.Replication.MinReplicasMaxLagSeconds = ptr.To[int32](2)
	procs, _ := startReplicationCache(t, rc)
	waitForPrimary(t, rc, "guard-0")
	eventually(t, 10*time.Second, func() error {
		got, err := procs[0].client().ConfigGet(testCtx, "min-replicas-*").Result()
		if err != nil || got["min-replicas-to-write"] != "1" || got["min-replicas-max-lag"] != "2" {
			return fmt.Errorf("the primary's CONFIG GET min-replicas-*: %v %v, want to-write 1, max-lag 2", got, err)
		}
		return nil
	})
	if err := procs[0].client().Set(testCtx, "before", "1", 0).Err(); err != nil {
		t.Fatalf("a write with both replicas in sync: %v", err)
	}

	procs[1].freeze()
	procs[2].freeze()
	rdb := procs[0].client()
	defer rdb.Close()
	start := time.Now()
	acked := 0
	var refused error
	for time.Since(start) < 20*time.Second {
		err := rdb.Set(testCtx, fmt.Sprintf("alone-%d", acked), "1", 0).Err()
		if err != nil {
			refused = err
			break
		}
		acked++
		time.Sleep(100 * time.Millisecond)
	}
	if refused == nil || !strings.HasPrefix(refused.Error(), "NOREPLICAS") {
		t.Fatalf("the primary cut off from its replicas for %v took %d writes and then: %v; want NOREPLICAS", time.Since(start), acked, refused)
	}
	t.Logf("refused writes (%v) %v after its replicas went silent, having acknowledged %d", refused, time.Since(start).Round(time.Millisecond), acked)
	// Redis counts its replicas once a second: max-lag 2 s, plus up to 2 s, at 10 writes a second.
	if acked > 45 {
		t.Errorf("%d writes acknowledged by a primary cut off from its replicas, want at most the writes of max-lag + 2 s (40)", acked)
	}
	procs[1].thaw()
	procs[2].thaw()
	eventually(t, 20*time.Second, func() error { return rdb.Set(testCtx, "back", "1", 0).Err() })
}

// TestReplicationDemotesAFormerPrimaryAndDisconnectsItsClients: a client keeps a connection open to
// the primary, which freezes and is failed over. When it thaws it still believes it is the
// primary; without a pod event (its pod never changed), the operator demotes it as soon as it
// answers, and disconnects its clients, so the open connection ends instead of writing into a
// server whose writes the resync drops.
func TestReplicationDemotesAFormerPrimaryAndDisconnectsItsClients(t *testing.T) {
	ns := newNamespace(t)
	rc := replicationCache(ns, "demote", 3, 1)
	procs, pods := startReplicationCache(t, rc)
	waitForPrimary(t, rc, "demote-0")
	conn, err := net.Dial("tcp", procs[0].addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if reply := roundTrip(t, conn, "PING"); reply != "+PONG" {
		t.Fatalf("PING on the open connection: %q", reply)
	}

	procs[0].freeze()
	setPodReady(t, pods[0], false) // the kubelet's probe, so the failover needs no PING (main has none)
	got := waitForPrimary(t, rc, "demote-1")
	if f := got.Status.Replication.LastFailover; f == nil || f.From != "demote-0" {
		t.Errorf("lastFailover = %+v", f)
	}
	setPodReady(t, pods[0], true) // the pod looks as before; no event is left to wake the operator
	time.Sleep(time.Second)       // let the reconciles the readiness change queued pass

	procs[0].thaw()
	start := time.Now()
	eventually(t, 10*time.Second, func() error {
		in, err := procs[0].tryInfo()
		if err != nil {
			return err
		}
		if in.Role != redisadmin.RoleReplica || in.MasterPort != procs[1].port {
			return fmt.Errorf("demote-0 after it thawed: %+v", in)
		}
		return nil
	})
	t.Logf("demote-0 demoted %v after it answered again", time.Since(start).Round(time.Millisecond))
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 256)
	n, err := conn.Read(buf)
	if err == nil {
		t.Errorf("the client's connection to the demoted primary is still open (read %q)", buf[:n])
	} else if ne := (net.Error)(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("the client's connection to the demoted primary is still open 5 s after: %v", err)
	}
	if p := primaries(t, rc); len(p) != 1 || p[0] != "demote-1" {
		t.Errorf("pods labelled primary: %v", p)
	}
}

// roundTrip sends an inline command on conn and returns the first line of the reply.
func roundTrip(t *testing.T, conn net.Conn, cmd string) string {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte(cmd + "\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(buf[:n]))
}

// TestReplicationReadinessProbeEndsOnAHungRedis runs the readiness probe of a Replication pod
// (the script the StatefulSet gets) against a frozen redis-server, as the container runtime does:
// at the timeout only the exec's own process (sh) is killed, and the probe is over when its output
// is closed. It must end, failed; the kubelet would otherwise wait forever and keep the pod Ready.
func TestReplicationReadinessProbeEndsOnAHungRedis(t *testing.T) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli is needed (apt-get install redis-tools): %v", err)
	}
	proc := startRedis(t, "save \"\"\n")
	rc := replicationCache("ns", "probe", 3, 5)
	rc.Spec.Redis.Port = proc.port
	probe := replicationReadinessProbe(rc)
	run := func() (error, time.Duration) {
		ctx, cancel := context.WithTimeout(testCtx, time.Duration(probe.TimeoutSeconds)*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, probe.Exec.Command[0], probe.Exec.Command[1:]...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out // a pipe, as the runtime's: Wait waits until every writer closed it
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- cmd.Run() }()
		select {
		case err := <-done:
			return err, time.Since(start)
		case <-time.After(20 * time.Second):
			return errors.New("the probe never ended"), time.Since(start)
		}
	}
	if err, _ := run(); err != nil {
		t.Fatalf("the probe fails on an answering Redis: %v", err)
	}
	proc.freeze()
	defer proc.thaw()
	err, took := run()
	if err == nil || err.Error() == "the probe never ended" {
		t.Fatalf("the probe on a frozen Redis: %v after %v; want it to fail at its timeout (%ds)", err, took, probe.TimeoutSeconds)
	}
	t.Logf("the probe failed after %v on a frozen Redis: %v", took.Round(time.Millisecond), err)
	if probe.PeriodSeconds*probe.FailureThreshold > 10 {
		t.Errorf("the probe turns a hung pod unready after %d s, want within 10 s", probe.PeriodSeconds*probe.FailureThreshold)
	}
}

// TestReplicationDeletedPrimaryLosesNoAcknowledgedWrite: a client writes as fast as it can to the
// primary, each SET followed by WAIT 1 (acknowledged only once a replica has it), when the
// primary's pod is deleted while its Redis still answers (a pod in its grace period). The
// operator pauses the old primary's writes and lets the replica it promotes catch up first:
// otherwise the other replica acknowledges writes the promoted one never got, and drops them
// when it resyncs from the new primary (the e2e chaos story saw it once on real pods).
func TestReplicationDeletedPrimaryLosesNoAcknowledgedWrite(t *testing.T) {
	ns := newNamespace(t)
	rc := replicationCache(ns, "drain", 3, 3600) // only the deletion may trigger the failover
	procs, pods := startReplicationCache(t, rc)
	waitForPrimary(t, rc, "drain-0")

	ctx, stop := context.WithCancel(testCtx)
	defer stop()
	type result struct{ acked, refused int }
	keys := make(chan []string, 1)
	res := make(chan result, 1)
	go func() {
		rdb := procs[0].client()
		defer rdb.Close()
		var acked []string
		var r result
		for i := 0; ctx.Err() == nil; i++ {
			key := fmt.Sprintf("k-%d", i)
			pipe := rdb.Pipeline()
			set := pipe.Set(ctx, key, i, 0)
			wait := pipe.Do(ctx, "WAIT", 1, 200)
			_, _ = pipe.Exec(ctx)
			if n, err := wait.Int(); set.Err() == nil && err == nil && n >= 1 {
				acked = append(acked, key)
				r.acked++
			} else {
				r.refused++
			}
		}
		keys <- acked
		res <- r
	}()
	time.Sleep(time.Second)
	// The pod is deleted; its finalizer keeps it terminating, its Redis running, as in a grace
	// period, until the failover is over (a pod object is gone only once its containers are).
	if err := k8s.Delete(testCtx, pods[0]); err != nil {
		t.Fatal(err)
	}
	var promoted string
	eventually(t, 15*time.Second, func() error {
		if r := getCache(t, rc).Status.Replication; r != nil && r.Primary != "drain-0" && r.Primary != "" {
			promoted = r.Primary
			return nil
		}
		return fmt.Errorf("drain-0 not replaced yet")
	})
	time.Sleep(6 * time.Second) // past the old primary's pause: it refuses writes (no replicas)
	stop()
	procs[0].kill()
	deletePod(t, pods[0]) // the finalizer goes: the pod object with it
	acked, r := <-keys, <-res
	if r.acked < 100 {
		t.Fatalf("only %d writes acknowledged before and around the failover: nothing to prove", r.acked)
	}
	p := map[string]*redisProc{"drain-1": procs[1], "drain-2": procs[2]}[promoted]
	other := map[string]*redisProc{"drain-1": procs[2], "drain-2": procs[1]}[promoted]
	// The other replica follows the new primary and has every key it has.
	eventually(t, 20*time.Second, func() error {
		in, err := other.tryInfo()
		if err != nil {
			return err
		}
		po := p.info(t)
		if in.Role != redisadmin.RoleReplica || in.MasterPort != p.port || !in.MasterLinkUp || in.Offset < po.Offset {
			return fmt.Errorf("the other replica: %+v, the primary at %d", in, po.Offset)
		}
		return nil
	})
	for name, proc := range map[string]*redisProc{promoted: p, "the other replica": other} {
		pipe := proc.client().Pipeline()
		exists := make([]*redis.IntCmd, len(acked))
		for i, k := range acked {
			exists[i] = pipe.Exists(testCtx, k)
		}
		if _, err := pipe.Exec(testCtx); err != nil {
			t.Fatal(err)
		}
		lost := 0
		first := ""
		for i, e := range exists {
			if e.Val() == 0 {
				lost++
				first = cmp.Or(first, acked[i])
			}
		}
		if lost > 0 {
			t.Errorf("%s lacks %d of the %d writes a replica acknowledged (WAIT 1), the first %s", name, lost, len(acked), first)
		}
	}
	t.Logf("%s promoted; %d writes acknowledged, %d refused or unacknowledged, none lost", promoted, r.acked, r.refused)
}
