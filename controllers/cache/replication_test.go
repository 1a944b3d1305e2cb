package cache

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/redisadmin"
)

// pod builds a member for decidePrimary: its role label, readiness, and what INFO replication
// said (nil: it did not answer).
func testMember(ordinal int, role string, ready bool, info *redisadmin.Info) *member {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c-" + itoa(int32(ordinal)), Labels: map[string]string{}}}
	if role != "" {
		p.Labels[roleLabel] = role
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	m := &member{pod: p, ordinal: ordinal, host: "10.0.0." + itoa(int32(ordinal)), port: 6379, info: info}
	if info == nil {
		m.err = errors.New("i/o timeout")
	}
	return m
}

// promoted gives m's pod the promotion record every pod the operator made primary carries.
func promoted(m *member) *member {
	m.pod.Annotations = map[string]string{promotedAnnotation: `{"to":"` + m.pod.Name + `","reason":"NoPrimary"}`}
	return m
}

func primaryAt(offset int64) *redisadmin.Info {
	return &redisadmin.Info{Role: redisadmin.RolePrimary, Offset: offset}
}

func replicaAt(offset int64) *redisadmin.Info {
	return &redisadmin.Info{Role: redisadmin.RoleReplica, MasterHost: "10.0.0.0", MasterPort: 6379, MasterLinkUp: true, Offset: offset}
}

func fenced() *redisadmin.Info {
	return &redisadmin.Info{Role: redisadmin.RoleReplica, MasterHost: fenceHost, MasterPort: fencePort}
}

func withKeys(in *redisadmin.Info, keys int64) *redisadmin.Info {
	in.Keys = keys
	return in
}

func TestDecidePrimary(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	after := 10 * time.Second
	tests := []struct {
		name     string
		members  []*member
		previous string
		since    time.Time
		want     string // the primary kept or promoted, "" for none
		promote  bool
		reason   string
		wait     time.Duration
	}{
		{"first boot: every pod fenced and empty, the lowest ordinal", []*member{
			testMember(0, "", true, fenced()), testMember(1, "", true, fenced()), testMember(2, "", true, fenced())},
			"", now, "c-0", true, ReasonNoPrimary, 0},
		{"first boot, pod 0 not ready yet: the lowest ready ordinal", []*member{
			testMember(0, "", false, fenced()), testMember(1, "", true, fenced())},
			"", now, "c-1", true, ReasonNoPrimary, 0},
		{"a healthy primary is kept", []*member{
			testMember(0, rolePrimary, true, primaryAt(500)), testMember(1, roleReplica, true, replicaAt(500))},
			"", now, "c-0", false, "", 0},
		{"a deleted primary: the most up-to-date replica at once, not the lowest ordinal", []*member{
			deleted(testMember(0, rolePrimary, true, primaryAt(900))), testMember(1, roleReplica, true, replicaAt(300)),
			testMember(2, roleReplica, true, replicaAt(900))},
			"", now, "c-2", true, ReasonPrimaryDeleted, 0},
		{"a restarted primary (fenced, empty) is not promoted again", []*member{
			testMember(0, rolePrimary, true, fenced()), testMember(1, roleReplica, true, replicaAt(700))},
			"", now, "c-1", true, ReasonPrimaryRestarted, 0},
		{"a primary that does not answer is waited for", []*member{
			testMember(0, rolePrimary, true, nil), testMember(1, roleReplica, true, replicaAt(700))},
			"", now.Add(-4 * time.Second), "c-0", false, ReasonPrimaryUnavailable, 6 * time.Second},
		{"a primary not ready for failoverAfter is replaced", []*member{
			testMember(0, rolePrimary, false, primaryAt(800)), testMember(1, roleReplica, true, replicaAt(700))},
			"", now.Add(-after), "c-1", true, ReasonPrimaryUnavailable, 0},
		{"the primary's pod is gone (the status named it): replaced at once", []*member{
			testMember(1, roleReplica, true, replicaAt(300)), testMember(2, roleReplica, true, replicaAt(900))},
			"c-0", now, "c-2", true, ReasonPrimaryDeleted, 0},
		{"no pod labelled, the primary the status named still there: a lost label, not a deletion", []*member{
			promoted(testMember(0, "", true, primaryAt(900))), testMember(1, roleReplica, true, replicaAt(300))},
			"c-0", now, "c-0", true, ReasonNoPrimary, 0},
		{"the primary's pod deleted and made again under its name before a reconcile (no promotion record): deleted", []*member{
			testMember(0, "", true, fenced()), testMember(1, roleReplica, true, replicaAt(300))},
			"c-0", now, "c-1", true, ReasonPrimaryDeleted, 0},
		{"no replica answers: nothing to promote", []*member{
			deleted(testMember(0, rolePrimary, true, primaryAt(800))), testMember(1, roleReplica, true, nil)},
			"", now, "", false, ReasonPrimaryDeleted, 0},
		{"an unready replica is no candidate", []*member{
			deleted(testMember(0, rolePrimary, true, nil)), testMember(1, roleReplica, false, replicaAt(999)),
			testMember(2, roleReplica, true, replicaAt(10))},
			"", now, "c-2", true, ReasonPrimaryDeleted, 0},
		{"half-done failover, two labelled: the one that answers as primary with the higher offset is kept", []*member{
			testMember(0, rolePrimary, true, replicaAt(100)), testMember(1, rolePrimary, true, primaryAt(900))},
			"", now, "c-1", false, "", 0},
		{"every pod of a persistent cache restarted (fenced, offset 0): the one that reloaded its data, not the lowest ordinal", []*member{
			testMember(0, "", true, withKeys(fenced(), 0)), testMember(1, "", true, withKeys(fenced(), 100)),
			testMember(2, "", true, withKeys(fenced(), 99))},
			"c-0", now, "c-1", true, ReasonPrimaryDeleted, 0},
		{"unlabelled primary after a lost label patch: promoting it is a no-op", []*member{
			testMember(0, "", true, replicaAt(400)), testMember(1, "", true, primaryAt(900))},
			"", now, "c-1", true, ReasonNoPrimary, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keep := int32(0) // no scale-down: every member stays
			for _, m := range tt.members {
				keep = max(keep, int32(m.ordinal)+1)
			}
			e := decidePrimary(tt.members, tt.previous, keep, tt.since, now, after, false)
			got := ""
			if e.primary != nil {
				got = e.primary.pod.Name
			}
			if got != tt.want || e.promote != tt.promote || e.reason != tt.reason || e.wait != tt.wait {
				t.Errorf("decidePrimary = primary %q promote %v reason %q wait %v; want %q %v %q %v (%s)",
					got, e.promote, e.reason, e.wait, tt.want, tt.promote, tt.reason, tt.wait, e.message)
			}
		})
	}
}

// TestDecidePrimaryGathersAPersistentCache: when every pod of a persistent cache just started,
// the election waits (up to failoverAfter) for all of them to answer, since one of those not
// up yet may hold more data; a cache without persistence, or with a replica that replicated
// before, elects at once.
func TestDecidePrimaryGathersAPersistentCache(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	after := 10 * time.Second
	firstUp := []*member{testMember(0, "", true, withKeys(fenced(), 0)), testMember(1, "", false, nil)}
	e := decidePrimary(firstUp, "c-0", 2, now.Add(-3*time.Second), now, after, true)
	if e.primary != nil || e.promote || e.wait != 7*time.Second {
		t.Errorf("persistent, 1 of 2 pods up and fresh: %+v, want no election and a wait of 7s", e)
	}
	if e = decidePrimary(firstUp, "c-0", 2, now.Add(-after), now, after, true); e.primary == nil || e.primary.pod.Name != "c-0" || !e.promote {
		t.Errorf("persistent, 1 of 2 pods up after failoverAfter: %+v, want c-0 elected", e)
	}
	if e = decidePrimary(firstUp, "c-0", 2, now, now, after, false); e.primary == nil || e.primary.pod.Name != "c-0" || !e.promote {
		t.Errorf("without persistence, 1 of 2 pods up: %+v, want c-0 elected at once (no data at stake)", e)
	}
	allUp := []*member{testMember(0, "", true, withKeys(fenced(), 0)), testMember(1, "", true, withKeys(fenced(), 5))}
	if e = decidePrimary(allUp, "c-0", 2, now, now, after, true); e.primary == nil || e.primary.pod.Name != "c-1" || !e.promote {
		t.Errorf("persistent, every pod up: %+v, want c-1 (it has the keys) elected at once", e)
	}
	live := []*member{deleted(testMember(0, rolePrimary, true, primaryAt(900))), testMember(1, roleReplica, true, replicaAt(900)),
		testMember(2, "", false, nil)}
	if e = decidePrimary(live, "", 3, now, now, after, true); e.primary == nil || e.primary.pod.Name != "c-1" || !e.promote {
		t.Errorf("persistent, the primary deleted and a linked replica up: %+v, want c-1 promoted at once", e)
	}
}

// TestDecidePrimaryDrainsADeletedPrimaryThatAnswers: a primary whose pod is being deleted but
// still answers as a primary is drained (its writes paused until the new one caught up) before
// the promotion; one that does not answer, or answers as a replica, is not.
func TestDecidePrimaryDrainsADeletedPrimaryThatAnswers(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name  string
		old   *redisadmin.Info
		drain bool
	}{
		{"answers as a primary", primaryAt(900), true},
		{"does not answer", nil, false},
		{"answers as a replica (restarted)", fenced(), false},
	} {
		e := decidePrimary([]*member{deleted(testMember(0, rolePrimary, true, c.old)), testMember(1, roleReplica, true, replicaAt(800))},
			"", 2, now, now, time.Second, false)
		if e.primary == nil || e.primary.pod.Name != "c-1" || !e.promote || e.drain != c.drain {
			t.Errorf("deleted primary that %s: %+v, want c-1 promoted, drain %v", c.name, e, c.drain)
		}
	}
}

// TestDecidePrimaryOnScaleDown: pods at or above spec.replicas are about to go: never promoted,
// and a healthy primary among them hands over (planned) to the best remaining pod.
func TestDecidePrimaryOnScaleDown(t *testing.T) {
	now := time.Now()
	e := decidePrimary([]*member{
		testMember(0, roleReplica, true, replicaAt(500)), testMember(1, roleReplica, true, replicaAt(900)),
		testMember(2, rolePrimary, true, primaryAt(900))}, "", 1, now, now, time.Second, false)
	if e.primary == nil || e.primary.pod.Name != "c-0" || !e.promote || !e.planned || e.reason != ReasonScaleDown || e.from != "c-2" {
		t.Errorf("scale-down to 1 with the primary c-2: %+v", e)
	}
	e = decidePrimary([]*member{
		testMember(0, roleReplica, false, replicaAt(500)), testMember(1, rolePrimary, true, primaryAt(900))}, "", 1, now, now, time.Second, false)
	if e.primary == nil || e.primary.pod.Name != "c-1" || e.promote {
		t.Errorf("scale-down with no remaining pod ready: the primary must keep serving, got %+v", e)
	}
	e = decidePrimary([]*member{
		deleted(testMember(0, rolePrimary, true, primaryAt(900))), testMember(1, roleReplica, true, replicaAt(900)),
		testMember(2, roleReplica, true, replicaAt(100))}, "", 2, now, now, time.Second, false)
	if e.primary == nil || e.primary.pod.Name != "c-1" {
		t.Errorf("a failover during a scale-down to 2 promotes a pod that stays, got %+v", e)
	}
	if got := statefulSetReplicas(replicationCache("ns", "c", 1, 10), 2); got != 3 {
		t.Errorf("StatefulSet size while the primary c-2 hands over: %d, want 3", got)
	}
	if got := statefulSetReplicas(replicationCache("ns", "c", 1, 10), 0); got != 1 {
		t.Errorf("StatefulSet size once c-0 is the primary: %d, want 1", got)
	}
	if got := statefulSetReplicas(replicationCache("ns", "c", 0, 10), 2); got != 0 {
		t.Errorf("StatefulSet size scaling to 0: %d, want 0", got)
	}
}

func deleted(m *member) *member { m.pod.DeletionTimestamp = &metav1.Time{Time: time.Now()}; return m }

func TestPodOrdinal(t *testing.T) {
	for name, want := range map[string]int{"c-0": 0, "my-cache-12": 12, "nodash": -1, "c-x": -1} {
		if got := podOrdinal(name); got != want {
			t.Errorf("podOrdinal(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestRenderRedisConfFencesReplicationPodsOnly(t *testing.T) {
	spec := sampleCache("ns", "c", 3).Spec
	if conf := renderRedisConf(spec); containsLine(conf, "replicaof 127.0.0.1 1") {
		t.Errorf("a Standalone cache boots as a replica:\n%s", conf)
	}
	spec.Mode = "Replication"
	if conf := renderRedisConf(spec); !containsLine(conf, "replicaof 127.0.0.1 1") {
		t.Errorf("a Replication pod does not boot fenced:\n%s", conf)
	}
}

func containsLine(text, line string) bool {
	for l := range strings.Lines(text) {
		if strings.TrimSuffix(l, "\n") == line {
			return true
		}
	}
	return false
}

// TestMinReplicasFor: the write guard asks for one replica by default with 2 or more pods, never
// more than there are replicas (a single pod, or a scale-down, must not refuse every write), and
// takes the spec's values otherwise.
func TestMinReplicasFor(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	for _, tc := range []struct {
		name     string
		replicas int32
		spec     *cachev1beta1.Replication
		want     redisadmin.MinReplicas
	}{
		{"one pod: off", 1, nil, redisadmin.MinReplicas{ToWrite: 0, MaxLagSeconds: 5}},
		{"scaled to 0", 0, nil, redisadmin.MinReplicas{ToWrite: 0, MaxLagSeconds: 5}},
		{"two pods: one replica", 2, nil, redisadmin.MinReplicas{ToWrite: 1, MaxLagSeconds: 5}},
		{"three pods, defaults", 3, &cachev1beta1.Replication{}, redisadmin.MinReplicas{ToWrite: 1, MaxLagSeconds: 5}},
		{"asked for 2 of 2 replicas, lag 10", 3, &cachev1beta1.Replication{MinReplicasToWrite: i32(2), MinReplicasMaxLagSeconds: i32(10)},
			redisadmin.MinReplicas{ToWrite: 2, MaxLagSeconds: 10}},
		{"asked for more than there are", 2, &cachev1beta1.Replication{MinReplicasToWrite: i32(3)}, redisadmin.MinReplicas{ToWrite: 1, MaxLagSeconds: 5}},
		{"turned off", 3, &cachev1beta1.Replication{MinReplicasToWrite: i32(0)}, redisadmin.MinReplicas{ToWrite: 0, MaxLagSeconds: 5}},
	} {
		rc := &cachev1beta1.RedisCache{Spec: cachev1beta1.RedisCacheSpec{Replicas: &tc.replicas, Replication: tc.spec}}
		if got := minReplicasFor(rc); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestFormerPrimaryAtLarge: the operator keeps looking (every second) while the pod its last
// promotion replaced runs without being a replica of the primary, for at most demotionWatch.
func TestFormerPrimaryAtLarge(t *testing.T) {
	now := time.Now()
	promoted := func(from string, at time.Time) *member {
		p := testMember(1, rolePrimary, true, primaryAt(100))
		p.pod.Annotations = map[string]string{promotedAnnotation: `{"time":"` + at.UTC().Format(time.RFC3339) + `","from":"` + from + `","to":"c-1","reason":"PrimaryUnavailable"}`}
		return p
	}
	running := func(m *member) *member { m.pod.Status.Phase = corev1.PodRunning; return m }
	silent := running(testMember(0, "", true, nil))
	following := running(testMember(0, "", true, &redisadmin.Info{Role: redisadmin.RoleReplica, MasterHost: "10.0.0.1", MasterPort: 6379}))
	stillPrimary := running(testMember(0, "", true, primaryAt(90)))
	for _, tc := range []struct {
		name    string
		p       *member
		members []*member
		want    bool
	}{
		{"silent former primary", promoted("c-0", now), []*member{silent}, true},
		{"former primary answering as a primary", promoted("c-0", now), []*member{stillPrimary}, true},
		{"former primary follows", promoted("c-0", now), []*member{following}, false},
		{"former primary gone", promoted("c-0", now), nil, false},
		{"first election", promoted("", now), []*member{silent}, false},
		{"failover long ago", promoted("c-0", now.Add(-demotionWatch-time.Minute)), []*member{silent}, false},
	} {
		if got := formerPrimaryAtLarge(tc.p, append(tc.members, tc.p), now); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestElectRestoredFirst: the first primary of a restored cache is pod 0, whose volume the
// restore wrote. Pod 1 starts empty; while pod 0 still loads a large backup (not ready, or not
// answering) the gathering wait of a persistent cache ends and decidePrimary elects pod 1 (the
// 1 GiB e2e restore came back empty so: pod 0 resynced to it). The restore overrides that: wait,
// however long, then pod 0. A cache not restored, or one that had a primary, is left alone.
func TestElectRestoredFirst(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	after := 10 * time.Second
	loading := []*member{testMember(0, "", false, nil), testMember(1, "", true, withKeys(fenced(), 0))}
	e := decidePrimary(loading, "", 2, now.Add(-time.Minute), now, after, true)
	if e.primary == nil || e.primary.pod.Name != "c-1" || !e.promote {
		t.Fatalf("the election without the restore: %+v, want c-1 (the case this guards against)", e)
	}
	if got := electRestoredFirst(e, loading, true); got.primary != nil || got.promote || got.wait != restoredPollInterval {
		t.Errorf("restored, pod 0 still loading: %+v, want no election and a poll", got)
	}
	if got := electRestoredFirst(e, loading, false); got.primary == nil || got.primary.pod.Name != "c-1" {
		t.Errorf("not restored: %+v, want decidePrimary's choice kept", got)
	}
	loaded := []*member{testMember(0, "", true, withKeys(fenced(), 1000)), testMember(1, "", true, withKeys(fenced(), 0))}
	gathering := decidePrimary(loaded[1:], "", 2, now, now, after, true) // pod 0 not seen yet: gathering
	if got := electRestoredFirst(gathering, loaded, true); got.primary == nil || got.primary.pod.Name != "c-0" || !got.promote || got.wait != 0 {
		t.Errorf("restored, pod 0 loaded: %+v, want c-0 elected at once", got)
	}
	kept := decidePrimary([]*member{testMember(0, rolePrimary, true, primaryAt(5)), testMember(1, roleReplica, true, replicaAt(5))}, "c-0", 2, now, now, after, true)
	if got := electRestoredFirst(kept, loaded, true); got.primary == nil || got.primary.pod.Name != "c-0" || got.promote {
		t.Errorf("a labelled primary: %+v, want it kept, nothing promoted", got)
	}
}

func TestRestoredAwaitingElection(t *testing.T) {
	rc := &cachev1beta1.RedisCache{}
	if restoredAwaitingElection(rc) {
		t.Error("a cache not restored awaits the restored pod")
	}
	rc.Status.Restore = &cachev1beta1.RestoreStatus{Phase: storagev1.RestoreSucceeded}
	if !restoredAwaitingElection(rc) {
		t.Error("a restored cache with no primary yet does not wait for pod 0")
	}
	rc.Status.Replication = &cachev1beta1.ReplicationStatus{Primary: "c-1"}
	if restoredAwaitingElection(rc) {
		t.Error("a restored cache that had a primary still overrides its elections")
	}
}
