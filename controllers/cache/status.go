package cache

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	"github.com/okgoes/okgoes-operator/internal/errclass"
)

// Condition reasons. Each is used by exactly one situation, so a Reason alone tells what happened.
const (
	// ReasonAvailable (Ready=True): every requested replica is ready with the current spec.
	ReasonAvailable = "Available"
	// ReasonScaledDown (Ready=True): replicas is 0 and no pod is left.
	ReasonScaledDown = "ScaledDown"
	// ReasonReplicasNotReady (Ready=False): the Deployment is rolling out or pods are not ready yet.
	ReasonReplicasNotReady = "ReplicasNotReady"
	// ReasonRollingOut (Progressing=True) and ReasonRolloutComplete (Progressing=False).
	ReasonRollingOut      = "RollingOut"
	ReasonRolloutComplete = "RolloutComplete"
	// ReasonAsExpected (Degraded=False).
	ReasonAsExpected = "AsExpected"
	// ReasonInvalidSpec (Ready=False, Degraded=True): the spec passed admission but the API
	// server rejected a child built from it. Not retried until the spec changes.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonResourceConflict (Degraded=True): a child's name is taken by an object we do not own.
	ReasonResourceConflict = "ResourceConflict"
	// ReasonAuthSecretNotFound (Degraded=True): spec.auth names a Secret or key that does not exist.
	ReasonAuthSecretNotFound = "AuthSecretNotFound"
	// ReasonProgressDeadlineExceeded and ReasonReplicaFailure (Degraded=True) come from the
	// Deployment's own conditions: pods cannot be created or do not become ready in time.
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	ReasonReplicaFailure           = "ReplicaFailure"
)

// observation is what one reconcile saw and did; computeStatus turns it into the status.
type observation struct {
	// deployment as returned by the last write or read, nil when the reconcile stopped before it.
	deployment *appsv1.Deployment
	// configHash of the configuration the Deployment was given.
	configHash string
	// err is the classified error that stopped the phases, nil when all of them ran.
	err error
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

	stalled, isStalled := errclass.AsStalled(obs.err)
	waiting, isWaiting := errclass.AsWaiting(obs.err)
	switch {
	case isStalled:
		set(cachev1beta1.ConditionReady, metav1.ConditionFalse, stalled.Reason, stalled.Message)
		set(cachev1beta1.ConditionDegraded, metav1.ConditionTrue, stalled.Reason, stalled.Message)
		set(cachev1beta1.ConditionProgressing, metav1.ConditionFalse, stalled.Reason, "waiting for the spec to be fixed")
		st.Phase = cachev1beta1.PhaseDegraded
		st.ObservedGeneration = gen // the spec was fully judged: it is invalid
		return st
	case isWaiting:
		set(cachev1beta1.ConditionReady, metav1.ConditionFalse, waiting.Reason, waiting.Message)
		set(cachev1beta1.ConditionDegraded, metav1.ConditionTrue, waiting.Reason, waiting.Message)
		set(cachev1beta1.ConditionProgressing, metav1.ConditionFalse, waiting.Reason, waiting.Message)
		st.Phase = cachev1beta1.PhaseDegraded
		st.ObservedGeneration = gen
		return st
	case obs.err != nil || obs.deployment == nil:
		// Transient failure: keep the last observation, do not claim this generation was acted on.
		return st
	}

	dep := obs.deployment
	want := desiredReplicas(rc)
	st.ObservedGeneration = gen
	st.ConfigHash = obs.configHash
	st.Replicas = dep.Status.Replicas
	st.ReadyReplicas = dep.Status.ReadyReplicas

	rolledOut := dep.Status.ObservedGeneration >= dep.Generation &&
		dep.Status.UpdatedReplicas == want && dep.Status.Replicas == want &&
		dep.Status.ReadyReplicas == want && dep.Status.AvailableReplicas == want
	switch {
	case rolledOut && want == 0:
		set(cachev1beta1.ConditionReady, metav1.ConditionTrue, ReasonScaledDown, "replicas is 0: the cache is scaled down")
	case rolledOut:
		set(cachev1beta1.ConditionReady, metav1.ConditionTrue, ReasonAvailable, fmt.Sprintf("%d of %d replicas ready", want, want))
	default:
		set(cachev1beta1.ConditionReady, metav1.ConditionFalse, ReasonReplicasNotReady,
			fmt.Sprintf("%d of %d replicas ready, %d updated", dep.Status.ReadyReplicas, want, dep.Status.UpdatedReplicas))
	}
	if rolledOut {
		set(cachev1beta1.ConditionProgressing, metav1.ConditionFalse, ReasonRolloutComplete, "the Deployment runs the current spec")
	} else {
		set(cachev1beta1.ConditionProgressing, metav1.ConditionTrue, ReasonRollingOut, "the Deployment is rolling out the current spec")
	}

	reason, msg := deploymentTrouble(dep)
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
