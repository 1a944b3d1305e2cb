package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

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
		in := procs[0].info(t)
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
