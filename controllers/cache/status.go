package cache

import (
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	"github.com/okgoes/okgoes-operator/internal/errclass"
)

// Condition reasons. Each is used by exactly one situation, so a Reason alone tells what happened.
const (
	// ReasonAvailable (Ready=True): every requested replica is ready with the current spec.
	ReasonAvailable = "Available"
	// ReasonScaledDown (Ready=True, Progressing=False, phase ScaledDown): replicas is 0, the
	// Deployment asks for no pod and none is left. Ready=True means "as the spec asks", not
	// "clients can connect": status.readyReplicas is 0.
	ReasonScaledDown = "ScaledDown"
	// ReasonScalingDown (Ready=False, Progressing=True): replicas is 0 and pods are still stopping.
	ReasonScalingDown = "ScalingDown"
	// ReasonReplicasNotReady (Ready=False): the Deployment is rolling out or pods are not ready yet.
	ReasonReplicasNotReady = "ReplicasNotReady"
	// ReasonRollingOut (Progressing=True) and ReasonRolloutComplete (Progressing=False).
	ReasonRollingOut      = "RollingOut"
	ReasonRolloutComplete = "RolloutComplete"
	// ReasonAsExpected (Degraded=False).
	ReasonAsExpected = "AsExpected"
	// ReasonInvalidSpec (Ready=False, Degraded=True): the spec passed admission but cannot work:
	// validateSpec refused it, or the API server refused (in a dry run, before any child is
	// written) the Deployment built from it. Not retried until the spec changes.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonResourceConflict (Degraded=True): a child's name is taken by an object we do not own.
	ReasonResourceConflict = "ResourceConflict"
	// ReasonAuthSecretNotFound (Degraded=True): spec.auth names a Secret or key that does not exist.
	ReasonAuthSecretNotFound = "AuthSecretNotFound"
	// ReasonProgressDeadlineExceeded and ReasonReplicaFailure (Degraded=True) come from the
	// Deployment's own conditions: pods cannot be created or do not become ready in time.
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	ReasonReplicaFailure           = "ReplicaFailure"
	// ReasonReplicationNotReady (Ready=False, Progressing=True; Replication mode): every pod is
	// ready but there is no primary yet, or a replica is not in sync with it.
	ReasonReplicationNotReady = "ReplicationNotReady"
)

// observation is what one reconcile saw and did; computeStatus turns it into the status.
type observation struct {
	// deployment as returned by the last write or read, nil when the reconcile stopped before it
	// or the cache is in Replication mode.
	deployment *appsv1.Deployment
	// statefulSet likewise, in Replication mode.
	statefulSet *appsv1.StatefulSet
	// replication is what reconcileReplication saw and did (Replication mode).
	replication *replicationObservation
	// now is when the reconcile decided (the clock of the failover timeout).
	now time.Time
	// configHash of the configuration the Deployment was given.
	configHash string
	// err is the classified error that stopped the phases, nil when all of them ran.
	err error
	// restore is what reconcileRestore saw (spec.restoreFrom), nil when it did nothing.
	restore *restoreProgress
	// backupRequeue > 0: look again after it for spec.backup (the next tick, a save under way).
	backupRequeue time.Duration
}

// computeStatus is the one place the status of a RedisCache is decided. It returns the status
// for rc given what the reconcile observed; it is pure so it can be table-tested.
func computeStatus(rc *cachev1beta1.RedisCache, obs observation) cachev1beta1.RedisCacheStatus {
	st := *rc.Status.DeepCopy()
	gen := rc.Generation
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen,
		})
	}

	if r := obs.restore; r != nil {
		set(cachev1beta1.ConditionRestoring, metav1.ConditionStatus(r.status), r.reason, r.message)
	}
	switch v := errclass.Of(obs.err); v.Class {
	case errclass.ClassWaiting, errclass.ClassStalled:
		if v.Reason != ReasonRestoring {
			break
		}
		// The restore runs: nothing is wrong, the StatefulSet waits for it.
		set(cachev1beta1.ConditionReady, metav1.ConditionFalse, v.Reason, v.Message)
		set(cachev1beta1.ConditionProgressing, metav1.ConditionTrue, v.Reason, v.Message)
		set(cachev1beta1.ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected, "")
		st.Phase = cachev1beta1.PhaseProgressing
		st.ObservedGeneration = gen
		return st
	}
	switch v := errclass.Of(obs.err); v.Class {
	case errclass.ClassStalled:
		set(cachev1beta1.ConditionReady, metav1.ConditionFalse, v.Reason, v.Message)
		set(cachev1beta1.ConditionDegraded, metav1.ConditionTrue, v.Reason, v.Message)
		set(cachev1beta1.ConditionProgressing, metav1.ConditionFalse, v.Reason, "waiting for the spec to be fixed")
		st.Phase = cachev1beta1.PhaseDegraded
		st.ObservedGeneration = gen // the spec was fully judged: it is invalid
		return st
	case errclass.ClassWaiting:
		set(cachev1beta1.ConditionReady, metav1.ConditionFalse, v.Reason, v.Message)
		set(cachev1beta1.ConditionDegraded, metav1.ConditionTrue, v.Reason, v.Message)
		set(cachev1beta1.ConditionProgressing, metav1.ConditionFalse, v.Reason, v.Message)
		st.Phase = cachev1beta1.PhaseDegraded
		st.ObservedGeneration = gen
		return st
	}
	w := workloadOf(obs)
	if obs.err != nil || w == nil {
		// Transient failure: keep the last observation, do not claim this generation was acted on.
		return st
	}

	want := desiredReplicas(rc)
	st.ObservedGeneration = gen
	st.ConfigHash = obs.configHash
	st.Replicas = w.replicas
	st.ReadyReplicas = w.ready

	if want == 0 {
		st.Replication = nil
		meta.RemoveStatusCondition(&st.Conditions, cachev1beta1.ConditionPrimaryAvailable)
		st.Phase = setScaledDownConditions(w, set)
		return st
	}
	rolledOut := w.observedGeneration >= w.generation &&
		w.updated == want && w.replicas == want && w.ready == want && w.available == want
	replicated, why := true, ""
	if isReplication(rc.Spec) {
		replicated, why = setReplicationStatus(&st, obs, gen)
	}
	switch {
	case rolledOut && replicated:
		set(cachev1beta1.ConditionReady, metav1.ConditionTrue, ReasonAvailable, fmt.Sprintf("%d of %d replicas ready", want, want))
		set(cachev1beta1.ConditionProgressing, metav1.ConditionFalse, ReasonRolloutComplete, "the "+w.kind+" runs the current spec")
	case rolledOut:
		set(cachev1beta1.ConditionReady, metav1.ConditionFalse, ReasonReplicationNotReady, why)
		set(cachev1beta1.ConditionProgressing, metav1.ConditionTrue, ReasonReplicationNotReady, why)
	default:
		set(cachev1beta1.ConditionReady, metav1.ConditionFalse, ReasonReplicasNotReady,
			fmt.Sprintf("%d of %d replicas ready, %d updated", w.ready, want, w.updated))
		set(cachev1beta1.ConditionProgressing, metav1.ConditionTrue, ReasonRollingOut, "the "+w.kind+" is rolling out the current spec")
	}
	rolledOut = rolledOut && replicated

	reason, msg := w.troubleReason, w.troubleMessage
	switch {
	case reason != "":
		set(cachev1beta1.ConditionDegraded, metav1.ConditionTrue, reason, msg)
		st.Phase = cachev1beta1.PhaseDegraded
	case rolledOut:
		set(cachev1beta1.ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected, "")
		st.Phase = cachev1beta1.PhaseReady
	default:
		set(cachev1beta1.ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected, "")
		st.Phase = cachev1beta1.PhaseProgressing
	}
	return st
}

// setScaledDownConditions sets the conditions of a cache asked for 0 replicas whose Deployment
// was given 0, and returns its phase. It is ScaledDown as soon as no pod is left; it does not wait
// for the Deployment controller to observe the new generation, since with no pod wanted there is
// nothing for it to roll out (and a control plane without one, such as `make run`, would otherwise
// never get there). Nothing can be degraded without pods, so stale Deployment conditions are not
// reported.
func setScaledDownConditions(w *workload, set func(t string, s metav1.ConditionStatus, reason, msg string)) cachev1beta1.Phase {
	set(cachev1beta1.ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected, "")
	if w.replicas > 0 {
		msg := fmt.Sprintf("replicas is 0: waiting for %d pods to stop", w.replicas)
		set(cachev1beta1.ConditionReady, metav1.ConditionFalse, ReasonScalingDown, msg)
		set(cachev1beta1.ConditionProgressing, metav1.ConditionTrue, ReasonScalingDown, msg)
		return cachev1beta1.PhaseProgressing
	}
	msg := "replicas is 0: no Redis pod runs, the configuration is kept"
	set(cachev1beta1.ConditionReady, metav1.ConditionTrue, ReasonScaledDown, msg)
	set(cachev1beta1.ConditionProgressing, metav1.ConditionFalse, ReasonScaledDown, msg)
	return cachev1beta1.PhaseScaledDown
}

// requeueAfter is when to look at a cache again although nothing it watches changed: the
// replication state of a cache in Replication mode (Redis reports it to no one), and a long
// safety net for a Standalone cache whose pods are expected to become ready (its Deployment's
// status changes wake the reconciler). A cache that is Ready, stopped by an error (its class decides, see internal/errclass), or
// whose Deployment asks for no pod is not polled: with 0 replicas nothing is left to wait for but
// pods stopping, which the Deployment's status reports.
func requeueAfter(st cachev1beta1.RedisCacheStatus, obs observation) time.Duration {
	d := workloadRequeueAfter(st, obs)
	if b := obs.backupRequeue; b > 0 && obs.err == nil && (d == 0 || b < d) {
		return b // the next backup tick, or a save under way (backup.go)
	}
	return d
}

// workloadRequeueAfter is requeueAfter for the pods alone.
func workloadRequeueAfter(st cachev1beta1.RedisCacheStatus, obs observation) time.Duration {
	w := workloadOf(obs)
	switch {
	case obs.err != nil || w == nil:
		return 0
	case w.specReplicas == 0:
		return 0
	case obs.replication != nil && obs.replication.wait > 0:
		return obs.replication.wait // the failover deadline of an unavailable primary
	case obs.replication != nil && obs.replication.recheck > 0:
		return obs.replication.recheck // a former primary to demote as soon as it answers
	case meta.IsStatusConditionTrue(st.Conditions, cachev1beta1.ConditionReady) && obs.statefulSet != nil:
		return replicationResync // Redis tells no one when a primary hangs: look again
	case meta.IsStatusConditionTrue(st.Conditions, cachev1beta1.ConditionReady):
		return 0
	case obs.statefulSet != nil:
		return waitForReplicas
	}
	return readinessSafetyNet
}

// workload is the part of a Deployment's or StatefulSet's status computeStatus reads.
type workload struct {
	kind                           string
	generation, observedGeneration int64
	specReplicas                   int32
	replicas, updated, ready       int32
	available                      int32
	troubleReason, troubleMessage  string
}

// workloadOf is the workload the reconcile observed, nil when it got to none.
func workloadOf(obs observation) *workload {
	switch {
	case obs.deployment != nil:
		d := obs.deployment
		w := &workload{kind: "Deployment", generation: d.Generation, observedGeneration: d.Status.ObservedGeneration,
			specReplicas: ptr.Deref(d.Spec.Replicas, 1), replicas: d.Status.Replicas, updated: d.Status.UpdatedReplicas,
			ready: d.Status.ReadyReplicas, available: d.Status.AvailableReplicas}
		w.troubleReason, w.troubleMessage = deploymentTrouble(d)
		return w
	case obs.statefulSet != nil:
		s := obs.statefulSet
		return &workload{kind: "StatefulSet", generation: s.Generation, observedGeneration: s.Status.ObservedGeneration,
			specReplicas: ptr.Deref(s.Spec.Replicas, 1), replicas: s.Status.Replicas, updated: s.Status.UpdatedReplicas,
			ready: s.Status.ReadyReplicas, available: s.Status.AvailableReplicas}
	}
	return nil
}

// setReplicationStatus records what reconcileReplication saw in st: status.replication and the
// PrimaryAvailable condition. It returns whether the replication is as the spec asks (a primary,
// every replica in sync) and, if not, why.
func setReplicationStatus(st *cachev1beta1.RedisCacheStatus, obs observation, gen int64) (bool, string) {
	r := obs.replication
	if r == nil {
		return false, "the replication was not observed"
	}
	rs := &cachev1beta1.ReplicationStatus{Primary: r.primary, Replicas: r.replicas}
	if old := st.Replication; old != nil {
		rs.LastFailover = old.LastFailover
	}
	if r.failover != nil {
		rs.LastFailover = r.failover
	}
	st.Replication = rs
	cond := metav1.Condition{Type: cachev1beta1.ConditionPrimaryAvailable, Status: metav1.ConditionTrue,
		Reason: r.reason, Message: r.message, ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(obs.now)}
	if !r.available {
		cond.Status = metav1.ConditionFalse
	}
	if obs.now.IsZero() {
		cond.LastTransitionTime = metav1.Time{}
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	if !r.available {
		return false, r.message
	}
	var behind []string
	for _, x := range r.replicas {
		if !x.InSync {
			behind = append(behind, x.Pod)
		}
	}
	if len(behind) > 0 {
		return false, fmt.Sprintf("replicas not in sync with the primary %s: %s", r.primary, strings.Join(behind, ", "))
	}
	return true, ""
}

// deploymentTrouble reports the Deployment conditions that need a human: a rollout past its
// progress deadline, or pods that cannot be created (quota, Pod Security admission, ...).
func deploymentTrouble(dep *appsv1.Deployment) (reason, message string) {
	for _, c := range dep.Status.Conditions {
		switch {
		case c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue:
			return ReasonReplicaFailure, c.Message
		case c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded":
			return ReasonProgressDeadlineExceeded, c.Message
		}
	}
	return "", ""
}
