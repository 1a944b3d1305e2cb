package cache

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/redisadmin"
)

// Replication mode: the operator is the only one who decides which pod is the primary. It
// records the decision in one place, the role label on the pods (which is also what routes the
// Services), and acts on Redis with REPLICAOF. Every pod boots fenced (see renderRedisConf), so
// no decision of the operator is ever needed to keep a pod from taking writes.

const (
	// promotedAnnotation on the primary's pod records its promotion (a Failover as JSON), written
	// with the role label in one patch: status.replication.lastFailover is read back from it, so
	// a lost status write or an operator restart does not lose the record.
	promotedAnnotation = "cache.okgoes.com/promoted"
	// roleLabel on a Redis pod says what the operator made of it; the Services select on it.
	roleLabel   = "cache.okgoes.com/role"
	rolePrimary = "primary"
	roleReplica = "replica"
	// fenceHost:fencePort is where a pod points at boot: nothing listens there.
	fenceHost = "127.0.0.1"
	fencePort = 1
	// inSyncLagBytes is the most a replica may be behind and still count (and serve) as in sync.
	inSyncLagBytes = 1 << 20
	// replicationResync is how often a cache in Replication mode is looked at although nothing
	// changed: to notice a primary that stopped answering before its readiness probe fails, and to
	// refresh the lag. Pod changes (deletion, readiness) wake the reconciler at once.
	replicationResync = 30 * time.Second
	// switchoverPause is how long writes are held on a primary that hands over (scale-down) or
	// whose pod is being deleted, at most, while the new primary catches up.
	switchoverPause = 4 * time.Second
	// defaultFailoverAfter is spec.replication.failoverAfterSeconds when unset (the CRD defaults
	// it too, see its doc).
	defaultFailoverAfter = 5 * time.Second
	// defaultMinReplicasMaxLag is spec.replication.minReplicasMaxLagSeconds when unset.
	defaultMinReplicasMaxLag = 5
	// demotionRecheck is how often a cache is looked at while a former primary has not been
	// seen demoted (it hangs or is cut off, and may come back believing it is the primary), for
	// at most demotionWatch after the failover; then the resync's 30 s.
	demotionRecheck = time.Second
	demotionWatch   = 5 * time.Minute
	// goneAnswerTimeout bounds the question to a primary whose pod is being deleted.
	goneAnswerTimeout = time.Second
)

// Failover reasons (status.replication.lastFailover.reason and the PrimaryAvailable condition).
const (
	ReasonNoPrimary          = "NoPrimary"
	ReasonPrimaryDeleted     = "PrimaryDeleted"
	ReasonPrimaryRestarted   = "PrimaryRestarted"
	ReasonPrimaryUnavailable = "PrimaryUnavailable"
	ReasonNoCandidate        = "NoCandidate"
	// ReasonScaleDown: a planned switchover, the primary's pod is about to be removed by a scale-down.
	ReasonScaleDown      = "ScaleDown"
	ReasonPrimaryElected = "Elected"
)

// RedisAdmin is what the reconciler asks of the Redis servers of a cache in Replication mode;
// redisadmin.Client implements it.
type RedisAdmin interface {
	// Replication returns INFO replication of the server at addr.
	Replication(ctx context.Context, addr, password string) (redisadmin.Info, error)
	// ReplicaOf points the server at addr at host:port, or makes it a primary when host is "".
	ReplicaOf(ctx context.Context, addr, password, host string, port int32) error
	// PauseWrites makes the server at addr hold writes for d (CLIENT PAUSE WRITE).
	PauseWrites(ctx context.Context, addr, password string, d time.Duration) error
	// EnsurePassword makes the server at addr accept password (authenticating with previous
	// while it does not yet) and, when previous is "", only password; it reports a change.
	EnsurePassword(ctx context.Context, addr, password, previous string) (bool, error)
	// EnsureMinReplicas sets the write guard of the server at addr (min-replicas-to-write,
	// min-replicas-max-lag) when it differs; it reports a change.
	EnsureMinReplicas(ctx context.Context, addr, password string, m redisadmin.MinReplicas) (bool, error)
	// KillClients disconnects the clients of the server at addr (not its replication links).
	KillClients(ctx context.Context, addr, password string) error
	// Persistence returns INFO persistence of the server at addr (backups).
	Persistence(ctx context.Context, addr, password string) (redisadmin.Persistence, error)
	// BGSave starts an RDB snapshot on the server at addr (backups).
	BGSave(ctx context.Context, addr, password string) error
}

// PodAddress is where the operator and the other Redis servers reach the Redis of pod.
type PodAddress func(pod *corev1.Pod, port int32) (host string, p int32)

// podIPAddress is the PodAddress of a cluster: the pod IP.
func podIPAddress(pod *corev1.Pod, port int32) (string, int32) { return pod.Status.PodIP, port }

// member is one Redis pod of a cache in Replication mode, as this reconcile saw it.
type member struct {
	pod     *corev1.Pod
	ordinal int
	host    string
	port    int32
	info    *redisadmin.Info // nil: the operator could not read it (see err)
	err     error
}

func (m *member) addr() string { return net.JoinHostPort(m.host, strconv.Itoa(int(m.port))) }
func (m *member) role() string { return m.pod.Labels[roleLabel] }
func (m *member) gone() bool   { return m.pod.DeletionTimestamp != nil }
func (m *member) ready() bool {
	for _, c := range m.pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// replicates tells whether m is a replica of p.
func (m *member) replicates(p *member) bool {
	return m.info != nil && m.info.Role == redisadmin.RoleReplica && m.info.MasterHost == p.host && m.info.MasterPort == p.port
}

// election is what decidePrimary made of the members.
type election struct {
	// primary is the pod that is (keep) or becomes (promote) the primary; nil when none can.
	primary *member
	// old is the labelled primary being replaced, nil when there was none.
	old *member
	// from names the primary being replaced, "" on a first election.
	from string
	// promote is true when primary must be made the primary now.
	promote bool
	// planned: the old primary is healthy and hands over (scale-down); writes are paused on it
	// until the new one has caught up.
	planned bool
	// drain: the old primary is being deleted but still answers. Its writes are paused and the new
	// primary catches up with it before the promotion, as in a planned switchover, so a replica
	// that acknowledged a write the new primary lacks never has to resync it away; best effort,
	// the pod is going anyway.
	drain bool
	// reason is why the labelled primary is not kept (a Reason* constant), "" when it is.
	reason, message string
	// wait > 0: the primary is unavailable but may come back; decide again after wait.
	wait time.Duration
}

// decidePrimary is the failover policy, pure: keep a labelled primary that is ready and answers
// as a primary; replace at once one that is deleted or restarted (a restarted Redis lost its data
// and boots fenced); wait up to after for one that is not ready or does not answer (since: when it
// was first seen so); then promote the ready, reachable pod with the highest replication offset
// (the most up-to-date), the lowest ordinal on a tie.
//
// previous is the primary the status last reported: when no pod is labelled primary and that pod
// no longer exists, it was deleted (and is named as the one replaced). keep is spec.replicas: pods
// with a higher ordinal are about to be removed by a scale-down, so they are never promoted, and a
// healthy primary among them hands over to a remaining replica first (a planned switchover).
//
// persistent (spec.persistence): pods that boot reload their volume, so a pod that just started
// may hold data. When every candidate just started (fenced, as after a restart of every pod),
// the election waits, up to after from since, until all keep pods answer: electing the first pod
// up could make the others resync to its empty dataset while one of them kept the data.
func decidePrimary(members []*member, previous string, keep int32, since, now time.Time, after time.Duration, persistent bool) election {
	var old *member
	for _, m := range members {
		if m.role() != rolePrimary {
			continue
		}
		// Two labelled pods only after a half-done failover: keep the better one.
		if old == nil || better(m, old) {
			old = m
		}
	}
	e := election{old: old}
	switch {
	case old == nil && previous != "" && !slices.ContainsFunc(members, func(m *member) bool { return m.pod.Name == previous }):
		e.reason, e.message, e.from = ReasonPrimaryDeleted, fmt.Sprintf("primary %s was deleted", previous), previous
	case old == nil && previous != "" && recreated(members, previous):
		e.reason, e.from = ReasonPrimaryDeleted, previous
		e.message = fmt.Sprintf("primary %s was deleted (its StatefulSet made a new pod of that name before the operator saw the old one go)", previous)
	case old == nil:
		e.reason, e.message = ReasonNoPrimary, "no pod is the primary"
	case old.gone():
		e.from = old.pod.Name
		e.reason, e.message = ReasonPrimaryDeleted, fmt.Sprintf("primary %s is being deleted", old.pod.Name)
		e.drain = old.info != nil && old.info.Role == redisadmin.RolePrimary
	case old.info != nil && old.info.Role == redisadmin.RoleReplica:
		e.from = old.pod.Name
		e.reason, e.message = ReasonPrimaryRestarted, fmt.Sprintf("primary %s restarted: its Redis is a replica (of %s:%d) and lost its data",
			old.pod.Name, old.info.MasterHost, old.info.MasterPort)
	case old.info == nil || !old.ready():
		e.reason, e.from = ReasonPrimaryUnavailable, old.pod.Name
		if old.info == nil {
			e.message = fmt.Sprintf("primary %s does not answer: %v", old.pod.Name, old.err)
		} else {
			e.message = fmt.Sprintf("primary %s is not ready", old.pod.Name)
		}
		if left := since.Add(after).Sub(now); left > 0 {
			e.primary, e.wait = old, left
			return e
		}
	case int32(old.ordinal) >= keep && keep > 0:
		e.reason, e.from, e.planned = ReasonScaleDown, old.pod.Name, true
		e.message = fmt.Sprintf("primary %s is removed by the scale-down to %d replicas", old.pod.Name, keep)
	default:
		e.primary = old
		return e
	}
	for _, m := range members {
		if m == old || m.gone() || m.info == nil || !m.ready() || (int32(m.ordinal) >= keep && keep > 0) {
			continue
		}
		if e.primary == nil || better(m, e.primary) {
			e.primary = m
		}
	}
	e.promote = e.primary != nil
	if persistent && e.promote && !e.planned {
		if n, fresh := candidates(members, keep); fresh && n < keep {
			if left := since.Add(after).Sub(now); left > 0 {
				e.message += fmt.Sprintf("; %d of %d pods answer and all just started: waiting up to %s for the others, which may have kept more data on their volumes",
					n, keep, left.Round(time.Second))
				e.primary, e.promote, e.wait = nil, false, left
				return e
			}
		}
	}
	if e.planned && !e.promote {
		e.primary = old // no replica to hand over to: keep serving
	}
	return e
}

// restoredPollInterval is how often the first election of a restored cache looks again for the
// pod that holds the restored data while it is not ready (loading a large dataset takes a while).
const restoredPollInterval = 2 * time.Second

// restoredAwaitingElection tells whether rc was restored (spec.restoreFrom, status.restore
// Succeeded) and has had no primary since: its first primary must be the pod whose volume the
// restore wrote, ordinal 0 (data-<name>-0).
func restoredAwaitingElection(rc *cachev1beta1.RedisCache) bool {
	st := rc.Status.Restore
	return st != nil && st.Phase == storagev1.RestoreSucceeded && (rc.Status.Replication == nil || rc.Status.Replication.Primary == "")
}

// electRestoredFirst overrides the first election of a restored cache: only the pod of ordinal 0
// holds the backup; every other pod starts empty. Electing one of them (the first up, while pod 0
// is still loading a large dataset) would make pod 0 resync to the empty primary and drop the
// restored data: seen on real pods with a 1 GiB backup (the election's gathering wait ended
// before pod 0 had loaded). So the election waits for pod 0, however long its loading takes (the
// cache serves nothing before: no pod is the primary), and elects it.
func electRestoredFirst(e election, members []*member, restored bool) election {
	if !restored || e.old != nil {
		return e
	}
	for _, m := range members {
		if m.ordinal != 0 {
			continue
		}
		if m.gone() || m.info == nil || !m.ready() {
			break
		}
		e.primary, e.promote, e.wait = m, true, 0
		e.message = "the first primary of a restored cache is " + m.pod.Name + ", whose volume holds the restored backup"
		return e
	}
	e.primary, e.promote, e.wait = nil, false, restoredPollInterval
	e.message = "waiting for pod 0, whose volume holds the restored backup, to load it and answer: electing another pod would make it resync the restored data away"
	return e
}

// candidates counts the pods that could be elected (ready, answering, kept by the scale), and
// tells whether all of them just started: fenced, replicas of the boot address.
func candidates(members []*member, keep int32) (n int32, fresh bool) {
	fresh = true
	for _, m := range members {
		if m.gone() || m.info == nil || !m.ready() || (int32(m.ordinal) >= keep && keep > 0) {
			continue
		}
		n++
		if m.info.Role != redisadmin.RoleReplica || m.info.MasterHost != fenceHost || m.info.MasterPort != fencePort {
			fresh = false
		}
	}
	return n, fresh
}

// better tells whether a should rather be the primary than b: reachable first, then the higher
// replication offset, then more keys, then the lower ordinal. Keys decide after a restart of
// every pod of a persistent cache: each reloads its own volume and reports offset 0, and
// promoting one that lost its volume would make the others resync to its empty dataset.
func better(a, b *member) bool {
	switch {
	case (a.info == nil) != (b.info == nil):
		return a.info != nil
	case a.info != nil && a.info.Offset != b.info.Offset:
		return a.info.Offset > b.info.Offset
	case a.info != nil && a.info.Keys != b.info.Keys:
		return a.info.Keys > b.info.Keys
	}
	return a.ordinal < b.ordinal
}

// replicationObservation is what reconcileReplication saw and did, for computeStatus.
type replicationObservation struct {
	primary   string
	available bool
	reason    string
	message   string
	replicas  []cachev1beta1.ReplicaStatus
	failover  *cachev1beta1.Failover
	// lag per replica pod, for the metrics.
	lag map[string]int64
	// servers is what INFO said of each pod that answered, for the memory metrics.
	servers map[string]*redisadmin.Info
	// wait > 0: decide again after it (a primary waited for).
	wait time.Duration
	// recheck > 0: look again after it although the replication is as decided (a former
	// primary not seen demoted yet).
	recheck time.Duration
	// members and elected are the pods as this reconcile saw them and the primary it kept or
	// promoted (nil when none): the backup phase picks the pod to save from them.
	members []*member
	elected *member
}

// reconcileReplication elects or keeps the primary, fails over, and points every other pod at
// the primary. It runs after the StatefulSet phase, in Replication mode only.
func (r *RedisCacheReconciler) reconcileReplication(ctx context.Context, s *scope) error {
	if !isReplication(s.cache.Spec) || s.obs.statefulSet == nil {
		return nil
	}
	members, err := r.observeMembers(ctx, s)
	if err != nil {
		return err
	}
	now := s.obs.now
	since := r.unavailableSince(s.cache, members, now)
	previous := ""
	if st := s.cache.Status.Replication; st != nil {
		previous = st.Primary
	}
	e := decidePrimary(members, previous, desiredReplicas(s.cache), since, now, failoverAfter(s.cache), s.cache.Spec.Persistence != nil)
	e = electRestoredFirst(e, members, restoredAwaitingElection(s.cache))
	obs := &replicationObservation{reason: e.reason, message: e.message, wait: e.wait, lag: map[string]int64{}, servers: map[string]*redisadmin.Info{}, members: members}
	s.obs.replication = obs
	for _, m := range members {
		if m.info != nil {
			obs.servers[m.pod.Name] = m.info
		}
	}
	if len(members) == 0 {
		obs.reason, obs.message = ReasonNoCandidate, "no Redis pod exists yet"
		return nil
	}
	if e.primary == nil && e.wait > 0 {
		return nil // gathering the pods of a persistent cache before the election
	}
	if e.primary == nil {
		obs.reason, obs.message = ReasonNoCandidate, e.message+"; no other pod is ready and answers"
		return nil
	}
	if e.wait > 0 {
		obs.primary = e.primary.pod.Name
		return nil // the primary may come back; nothing is moved meanwhile
	}
	if e.promote {
		f := cachev1beta1.Failover{Time: metav1.NewTime(now), From: e.from, To: e.primary.pod.Name, Reason: e.reason}
		if err := r.failover(ctx, s, e, f); err != nil {
			return err
		}
		countFailover(s.cache, f)
	} else if err := r.ensureMinReplicas(ctx, s, e.primary); err != nil {
		return err
	}
	p := e.primary
	obs.failover = promotionOf(p.pod)
	obs.primary, obs.available, obs.elected = p.pod.Name, true, p
	obs.reason, obs.message = ReasonPrimaryElected, fmt.Sprintf("%s is the primary", p.pod.Name)
	if e.planned && !e.promote {
		obs.reason, obs.message = ReasonNoCandidate, e.message+"; no remaining replica is ready to take over"
	}
	if err := r.reconcileReplicas(ctx, s, p, members); err != nil {
		return err
	}
	if formerPrimaryAtLarge(p, members, now) {
		obs.recheck = demotionRecheck
	}
	return nil
}

// unavailableSince is when the labelled primary was first seen unavailable: when the
// PrimaryAvailable condition turned False, or earlier, when the primaryProbe's PING first went
// unanswered; now when it is available.
func (r *RedisCacheReconciler) unavailableSince(rc *cachev1beta1.RedisCache, members []*member, now time.Time) time.Time {
	since := now
	if c := meta.FindStatusCondition(rc.Status.Conditions, cachev1beta1.ConditionPrimaryAvailable); c != nil && c.Status == metav1.ConditionFalse {
		since = c.LastTransitionTime.Time
	}
	for _, m := range members {
		if m.role() != rolePrimary {
			continue
		}
		if t, silent := r.probe.silentSince(m.pod.UID); silent && t.Before(since) {
			since = t
		}
	}
	return since
}

// formerPrimaryAtLarge tells whether the primary p replaced, by its last promotion (less than
// demotionWatch ago), is still running without being seen as a replica of p: hung or cut off, it
// may come back believing it is the primary, and must be demoted as soon as it answers.
func formerPrimaryAtLarge(p *member, members []*member, now time.Time) bool {
	f := promotionOf(p.pod)
	if f == nil || f.From == "" || now.Sub(f.Time.Time) > demotionWatch {
		return false
	}
	for _, m := range members {
		if m.pod.Name == f.From && !m.gone() && m.pod.Status.Phase == corev1.PodRunning {
			return !m.replicates(p)
		}
	}
	return false
}

// minReplicasFor is the write guard of rc's primary (spec.replication.minReplicasToWrite and
// minReplicasMaxLagSeconds): by default one replica with 2 or more pods, never more than the
// replicas there are (spec.replicas - 1), so a scale-down does not leave a primary that refuses
// every write.
func minReplicasFor(rc *cachev1beta1.RedisCache) redisadmin.MinReplicas {
	m := redisadmin.MinReplicas{ToWrite: 1, MaxLagSeconds: defaultMinReplicasMaxLag}
	if r := rc.Spec.Replication; r != nil {
		if r.MinReplicasToWrite != nil {
			m.ToWrite = *r.MinReplicasToWrite
		}
		if r.MinReplicasMaxLagSeconds != nil {
			m.MaxLagSeconds = *r.MinReplicasMaxLagSeconds
		}
	}
	m.ToWrite = max(min(m.ToWrite, desiredReplicas(rc)-1), 0)
	return m
}

// ensureMinReplicas gives the primary p the write guard of the spec (live, CONFIG SET).
func (r *RedisCacheReconciler) ensureMinReplicas(ctx context.Context, s *scope, p *member) error {
	if p.info == nil {
		return nil
	}
	m := minReplicasFor(s.cache)
	changed, err := r.redis().EnsureMinReplicas(ctx, p.addr(), s.password, m)
	if err != nil {
		return fmt.Errorf("set the write guard of %s: %w", p.pod.Name, err)
	}
	if changed {
		log.FromContext(ctx).Info("set the primary's write guard", "pod", p.pod.Name, "minReplicasToWrite", m.ToWrite, "maxLagSeconds", m.MaxLagSeconds)
	}
	return nil
}

// demote makes m, a server that answers as a primary although it is not the elected one (a
// former primary that hung or was cut off), a replica of p, then disconnects its clients: those
// that kept a connection open to it reconnect through the Service, to p. What m took alone is
// dropped by its resync from p: the writes min-replicas-max-lag still let through.
func (r *RedisCacheReconciler) demote(ctx context.Context, s *scope, m, p *member) error {
	if err := r.redis().ReplicaOf(ctx, m.addr(), s.password, p.host, p.port); err != nil {
		return fmt.Errorf("demote %s: %w", m.pod.Name, err)
	}
	if err := r.redis().KillClients(ctx, m.addr(), s.password); err != nil {
		return fmt.Errorf("disconnect the clients of the demoted %s: %w", m.pod.Name, err)
	}
	log.FromContext(ctx).Info("demoted a former primary and disconnected its clients", "pod", m.pod.Name, "primary", p.pod.Name)
	if r.Recorder != nil {
		r.Recorder.Eventf(s.cache, corev1.EventTypeWarning, "Demoted", "%s answered as a primary beside %s: made it a replica of %s and disconnected its clients",
			m.pod.Name, p.pod.Name, p.pod.Name)
	}
	return nil
}

// failover moves the primary role from e.old to e.primary, in the order that never leaves two
// pods taking writes: the old primary loses its label (the Service stops sending it clients) and,
// when it answers, becomes a replica before the new one is promoted and labelled.
func (r *RedisCacheReconciler) failover(ctx context.Context, s *scope, e election, f cachev1beta1.Failover) error {
	logger := log.FromContext(ctx)
	if e.planned || e.drain {
		if err := r.catchUp(ctx, s, e.old, e.primary); err != nil {
			if e.planned {
				return err
			}
			logger.Info("promoting without the deleted primary's last writes", "pod", e.old.pod.Name, "error", err.Error())
		}
	}
	if o := e.old; o != nil && o != e.primary {
		if err := r.setRole(ctx, o, "", nil); err != nil {
			return err
		}
		if o.info != nil && !o.gone() {
			if err := r.demote(ctx, s, o, e.primary); err != nil {
				logger.Info("could not demote the old primary; it is fenced by its label and demoted when it answers", "pod", o.pod.Name, "error", err.Error())
			}
		}
	}
	p := e.primary
	// The write guard before the first write can reach p.
	if err := r.ensureMinReplicas(ctx, s, p); err != nil {
		logger.Info("promoting without the write guard; set at the next reconcile", "pod", p.pod.Name, "error", err.Error())
	}
	if p.info.Role != redisadmin.RolePrimary {
		if err := r.redis().ReplicaOf(ctx, p.addr(), s.password, "", 0); err != nil {
			return fmt.Errorf("promote %s: %w", p.pod.Name, err)
		}
		p.info.Role, p.info.MasterHost, p.info.MasterPort = redisadmin.RolePrimary, "", 0
	}
	record, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if err := r.setRole(ctx, p, rolePrimary, map[string]string{promotedAnnotation: string(record)}); err != nil {
		return err
	}
	logger.Info("promoted a replica", "pod", p.pod.Name, "offset", p.info.Offset, "reason", e.reason)
	if r.Recorder != nil {
		r.Recorder.Eventf(s.cache, corev1.EventTypeWarning, "Failover", "%s: promoted %s (offset %d)", e.message, p.pod.Name, p.info.Offset)
	}
	return nil
}

// catchUp holds writes on the old primary and waits (at most switchoverPause/2) until the new one
// has applied everything the old one acknowledged, so a planned switchover, or the failover of a
// primary whose pod is being deleted while it still answers, loses no acknowledged write.
func (r *RedisCacheReconciler) catchUp(ctx context.Context, s *scope, old, next *member) error {
	if err := r.redis().PauseWrites(ctx, old.addr(), s.password, switchoverPause); err != nil {
		return fmt.Errorf("pause writes on %s: %w", old.pod.Name, err)
	}
	deadline := time.Now().Add(switchoverPause / 2)
	for {
		o, err1 := r.redis().Replication(ctx, old.addr(), s.password)
		if err1 != nil {
			// Gone (a deleted pod exits): there is nothing left to catch up with.
			return fmt.Errorf("read the offset of %s: %w", old.pod.Name, err1)
		}
		n, err2 := r.redis().Replication(ctx, next.addr(), s.password)
		if err2 == nil && n.Offset >= o.Offset {
			next.info = &n
			return nil
		}
		if time.Now().After(deadline) {
			// Do not hold the writes for the rest of the pause: the next reconcile tries again.
			_ = r.redis().PauseWrites(ctx, old.addr(), s.password, 0)
			return fmt.Errorf("%s did not catch up with %s within %s (offsets %d, %d; %v)", next.pod.Name, old.pod.Name,
				switchoverPause/2, n.Offset, o.Offset, err2)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reconcileReplicas points every other answering pod at p and labels the replicas in sync, so
// the read Service sends clients to them only.
func (r *RedisCacheReconciler) reconcileReplicas(ctx context.Context, s *scope, p *member, members []*member) error {
	obs := s.obs.replication
	for _, m := range members {
		if m == p || m.gone() {
			continue
		}
		st := cachev1beta1.ReplicaStatus{Pod: m.pod.Name}
		role := ""
		switch {
		case m.info == nil:
		case m.info.Role == redisadmin.RolePrimary:
			// A former primary that came back (it hung, or was cut off): it still takes writes.
			if err := r.demote(ctx, s, m, p); err != nil {
				return err
			}
		case !m.replicates(p):
			// A new pod, or one still fenced: follow p.
			if err := r.redis().ReplicaOf(ctx, m.addr(), s.password, p.host, p.port); err != nil {
				return fmt.Errorf("point %s at the primary: %w", m.pod.Name, err)
			}
		default:
			lag := max(p.info.Offset-m.info.Offset, 0)
			obs.lag[m.pod.Name] = lag
			st.InSync = m.info.MasterLinkUp && lag <= inSyncLagBytes
			if !st.InSync {
				st.LagBytes = ptr.To(lag)
			}
		}
		if st.InSync {
			role = roleReplica
		}
		if err := r.setRole(ctx, m, role, nil); err != nil {
			return err
		}
		obs.replicas = append(obs.replicas, st)
	}
	return nil
}

// observeMembers lists the pods of the cache's StatefulSet and asks each running one for its
// replication state.
func (r *RedisCacheReconciler) observeMembers(ctx context.Context, s *scope) ([]*member, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(s.cache.Namespace), client.MatchingLabels(selectorLabels(s.cache))); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	addr := r.PodAddress
	if addr == nil {
		addr = podIPAddress
	}
	var members []*member
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !metav1.IsControlledBy(pod, s.obs.statefulSet) {
			continue
		}
		m := &member{pod: pod, ordinal: podOrdinal(pod.Name)}
		m.host, m.port = addr(pod, s.cache.Spec.Redis.Port)
		if since, silent := r.probe.silentSince(pod.UID); silent && m.role() == rolePrimary {
			// The primaryProbe's PING, once a second, goes unanswered: asking again would only
			// add a timeout (2 s) to the failover. The probe wakes the reconcile when it answers.
			m.err = fmt.Errorf("no answer to the operator's PING since %s", since.UTC().Format(time.RFC3339))
			members = append(members, m)
			continue
		}
		switch {
		case m.host != "" && pod.Status.Phase == corev1.PodRunning && !m.gone():
			if err := r.ensurePassword(ctx, s, m); err != nil {
				m.err = err
				members = append(members, m)
				continue
			}
			info, err := r.redis().Replication(ctx, m.addr(), s.password)
			if err == nil {
				m.info = &info
			}
			m.err = err
		case m.host != "" && pod.Status.Phase == corev1.PodRunning && m.role() == rolePrimary:
			// A primary in its grace period may still take writes: the failover drains it when it
			// answers (see election.drain), and does not wait long for one that does not.
			gctx, cancel := context.WithTimeout(ctx, goneAnswerTimeout)
			info, err := r.redis().Replication(gctx, m.addr(), s.password)
			cancel()
			if err == nil {
				m.info = &info
			}
			m.err = err
		default:
			m.err = fmt.Errorf("pod is %s", cmp.Or(string(pod.Status.Phase), "not started"))
		}
		members = append(members, m)
	}
	slices.SortFunc(members, func(a, b *member) int { return a.ordinal - b.ordinal })
	return members, nil
}

// ensurePassword rotates the password of m's Redis to the Secret's without a restart (see
// docs/rediscache.md, Password rotation); nothing to do for a cache without auth.
func (r *RedisCacheReconciler) ensurePassword(ctx context.Context, s *scope, m *member) error {
	if s.password == "" {
		return nil
	}
	changed, err := r.redis().EnsurePassword(ctx, m.addr(), s.password, s.previousPassword)
	if changed {
		log.FromContext(ctx).Info("rotated the Redis password", "pod", m.pod.Name, "previousKept", s.previousPassword != "")
		if r.Recorder != nil {
			r.Recorder.Eventf(s.cache, corev1.EventTypeNormal, "PasswordRotated", "pod %s takes the Secret's password (previous one kept: %t)",
				m.pod.Name, s.previousPassword != "")
		}
	}
	return err
}

// setRole sets (or, with "", removes) the role label of m's pod, with annotations, when it differs.
func (r *RedisCacheReconciler) setRole(ctx context.Context, m *member, role string, annotations map[string]string) error {
	if m.role() == role && annotations == nil {
		return nil
	}
	orig := m.pod.DeepCopy()
	if annotations != nil {
		m.pod.Annotations = mergeInto(m.pod.Annotations, annotations)
	}
	if role == "" {
		delete(m.pod.Labels, roleLabel)
	} else {
		m.pod.Labels = mergeInto(m.pod.Labels, map[string]string{roleLabel: role})
	}
	if err := r.Patch(ctx, m.pod, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("label pod %s %s=%q: %w", m.pod.Name, roleLabel, role, err)
	}
	return nil
}

// recreated tells whether the pod named previous (the primary the status names, now without the
// primary label) is a new pod of that name: it carries no promotion record, which every pod the
// operator made primary has (failover), and which the label's removal in the middle of a failover
// leaves in place. Without this, a primary deleted and recreated by its StatefulSet between two
// reconciles was reported NoPrimary, as a first election is, and OkgoesRedisFailover (which counts
// PrimaryDeleted, not NoPrimary) never fired: seen in CI.
func recreated(members []*member, previous string) bool {
	i := slices.IndexFunc(members, func(m *member) bool { return m.pod.Name == previous })
	return i >= 0 && promotionOf(members[i].pod) == nil
}

// promotionOf is the promotion recorded on a primary's pod, nil if none is (or it is unreadable).
func promotionOf(pod *corev1.Pod) *cachev1beta1.Failover {
	raw, ok := pod.Annotations[promotedAnnotation]
	if !ok {
		return nil
	}
	f := &cachev1beta1.Failover{}
	if json.Unmarshal([]byte(raw), f) != nil {
		return nil
	}
	return f
}

func (r *RedisCacheReconciler) redis() RedisAdmin {
	if r.Redis == nil {
		return redisadmin.Client{}
	}
	return r.Redis
}

func failoverAfter(rc *cachev1beta1.RedisCache) time.Duration {
	if r := rc.Spec.Replication; r != nil && r.FailoverAfterSeconds != nil {
		return time.Duration(*r.FailoverAfterSeconds) * time.Second
	}
	return defaultFailoverAfter
}

// statefulSetReplicas is the StatefulSet size for rc: spec.replicas, except while a scale-down
// would remove the pod labelled primary (ordinal primaryOrdinal): then the pods up to it stay
// until reconcileReplication has handed over to a remaining one.
func statefulSetReplicas(rc *cachev1beta1.RedisCache, primaryOrdinal int) int32 {
	want := desiredReplicas(rc)
	if want > 0 && int32(primaryOrdinal) >= want {
		return int32(primaryOrdinal) + 1
	}
	return want
}

// primaryOrdinal is the ordinal of the pod of rc labelled primary, -1 if none is.
func (r *RedisCacheReconciler) primaryOrdinal(ctx context.Context, rc *cachev1beta1.RedisCache) (int, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(rc.Namespace),
		client.MatchingLabels(mergeInto(selectorLabels(rc), map[string]string{roleLabel: rolePrimary}))); err != nil {
		return -1, fmt.Errorf("list pods: %w", err)
	}
	o := -1
	for _, p := range pods.Items {
		o = max(o, podOrdinal(p.Name))
	}
	return o, nil
}

// podOrdinal is the ordinal of a StatefulSet pod (<name>-<ordinal>), -1 if it has none.
func podOrdinal(name string) int {
	i := strings.LastIndex(name, "-")
	n, err := strconv.Atoi(name[i+1:])
	if i < 0 || err != nil {
		return -1
	}
	return n
}
