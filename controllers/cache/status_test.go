package cache

import (
	"errors"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	"github.com/okgoes/okgoes-operator/internal/errclass"
)

func corev1PullPolicy(s string) corev1.PullPolicy { return corev1.PullPolicy(s) }

func cacheWith(replicas int32, generation int64) *cachev1beta1.RedisCache {
	return &cachev1beta1.RedisCache{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Generation: generation},
		Spec:       cachev1beta1.RedisCacheSpec{Replicas: &replicas},
	}
}

func deploymentWith(gen, observed int64, replicas, updated, ready int32, conds ...appsv1.DeploymentCondition) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Generation: gen},
		Status: appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated,
			ReadyReplicas: ready, AvailableReplicas: ready, Conditions: conds},
	}
}

func TestComputeStatus(t *testing.T) {
	tests := []struct {
		name          string
		cache         *cachev1beta1.RedisCache
		obs           observation
		wantPhase     cachev1beta1.Phase
		wantReady     metav1.ConditionStatus
		wantReason    string
		wantDegraded  string
		wantObserved  int64
		wantReadyRepl int32
	}{
		{
			name: "all replicas ready and updated", cache: cacheWith(3, 4),
			obs:       observation{deployment: deploymentWith(2, 2, 3, 3, 3), configHash: "h"},
			wantPhase: cachev1beta1.PhaseReady, wantReady: metav1.ConditionTrue, wantReason: ReasonAvailable,
			wantDegraded: ReasonAsExpected, wantObserved: 4, wantReadyRepl: 3,
		},
		{
			name: "deployment controller has not seen the new template", cache: cacheWith(3, 4),
			obs:       observation{deployment: deploymentWith(3, 2, 3, 3, 3)},
			wantPhase: cachev1beta1.PhaseProgressing, wantReady: metav1.ConditionFalse, wantReason: ReasonReplicasNotReady,
			wantDegraded: ReasonAsExpected, wantObserved: 4, wantReadyRepl: 3,
		},
		{
			name: "old pods still running during a rollout", cache: cacheWith(2, 1),
			obs:       observation{deployment: deploymentWith(1, 1, 3, 1, 2)},
			wantPhase: cachev1beta1.PhaseProgressing, wantReady: metav1.ConditionFalse, wantReason: ReasonReplicasNotReady,
			wantDegraded: ReasonAsExpected, wantObserved: 1, wantReadyRepl: 2,
		},
		{
			name: "scaled to zero", cache: cacheWith(0, 2),
			obs:       observation{deployment: deploymentWith(1, 1, 0, 0, 0)},
			wantPhase: cachev1beta1.PhaseScaledDown, wantReady: metav1.ConditionTrue, wantReason: ReasonScaledDown,
			wantDegraded: ReasonAsExpected, wantObserved: 2,
		},
		{
			// A control plane without a Deployment controller (make run): the status never moves.
			name: "scaled to zero, Deployment status never written", cache: cacheWith(0, 1),
			obs:       observation{deployment: deploymentWith(1, 0, 0, 0, 0)},
			wantPhase: cachev1beta1.PhaseScaledDown, wantReady: metav1.ConditionTrue, wantReason: ReasonScaledDown,
			wantDegraded: ReasonAsExpected, wantObserved: 1,
		},
		{
			name: "scaling to zero, pods still stopping", cache: cacheWith(0, 3),
			obs:       observation{deployment: deploymentWith(2, 1, 2, 2, 2)},
			wantPhase: cachev1beta1.PhaseProgressing, wantReady: metav1.ConditionFalse, wantReason: ReasonScalingDown,
			wantDegraded: ReasonAsExpected, wantObserved: 3, wantReadyRepl: 2,
		},
		{
			name: "pods cannot be created", cache: cacheWith(1, 1),
			obs: observation{deployment: deploymentWith(1, 1, 0, 0, 0, appsv1.DeploymentCondition{
				Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Message: "forbidden: violates PodSecurity"})},
			wantPhase: cachev1beta1.PhaseDegraded, wantReady: metav1.ConditionFalse, wantReason: ReasonReplicasNotReady,
			wantDegraded: ReasonReplicaFailure, wantObserved: 1,
		},
		{
			name: "rollout past its deadline", cache: cacheWith(1, 1),
			obs: observation{deployment: deploymentWith(1, 1, 1, 1, 0, appsv1.DeploymentCondition{
				Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"})},
			wantPhase: cachev1beta1.PhaseDegraded, wantReady: metav1.ConditionFalse, wantReason: ReasonReplicasNotReady,
			wantDegraded: ReasonProgressDeadlineExceeded, wantObserved: 1,
		},
		{
			name: "invalid spec is terminal and observed", cache: cacheWith(1, 7),
			obs:       observation{err: errclass.Stalled(ReasonInvalidSpec, "bad")},
			wantPhase: cachev1beta1.PhaseDegraded, wantReady: metav1.ConditionFalse, wantReason: ReasonInvalidSpec,
			wantDegraded: ReasonInvalidSpec, wantObserved: 7,
		},
		{
			name: "missing secret is waited for", cache: cacheWith(1, 2),
			obs:       observation{err: errclass.Waiting(ReasonAuthSecretNotFound, "no secret", time.Second)},
			wantPhase: cachev1beta1.PhaseDegraded, wantReady: metav1.ConditionFalse, wantReason: ReasonAuthSecretNotFound,
			wantDegraded: ReasonAuthSecretNotFound, wantObserved: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := computeStatus(tt.cache, tt.obs)
			ready := meta.FindStatusCondition(st.Conditions, cachev1beta1.ConditionReady)
			degraded := meta.FindStatusCondition(st.Conditions, cachev1beta1.ConditionDegraded)
			if ready == nil || degraded == nil || meta.FindStatusCondition(st.Conditions, cachev1beta1.ConditionProgressing) == nil {
				t.Fatalf("missing conditions: %+v", st.Conditions)
			}
			if st.Phase != tt.wantPhase || ready.Status != tt.wantReady || ready.Reason != tt.wantReason ||
				degraded.Reason != tt.wantDegraded || st.ObservedGeneration != tt.wantObserved || st.ReadyReplicas != tt.wantReadyRepl {
				t.Errorf("got phase=%s ready=%s/%s degraded=%s observed=%d readyReplicas=%d", st.Phase, ready.Status,
					ready.Reason, degraded.Reason, st.ObservedGeneration, st.ReadyReplicas)
			}
			if ready.ObservedGeneration != tt.cache.Generation {
				t.Errorf("Ready.observedGeneration = %d, want %d", ready.ObservedGeneration, tt.cache.Generation)
			}
		})
	}
}

func TestComputeStatusKeepsLastObservationOnTransientError(t *testing.T) {
	rc := cacheWith(1, 5)
	rc.Status = computeStatus(cacheWith(1, 4), observation{deployment: deploymentWith(1, 1, 1, 1, 1)})
	got := computeStatus(rc, observation{err: errors.New("etcd timeout")})
	if got.ObservedGeneration != 4 || got.Phase != cachev1beta1.PhaseReady {
		t.Errorf("a transient error changed the status: observed=%d phase=%s", got.ObservedGeneration, got.Phase)
	}
}

func TestRequeueAfter(t *testing.T) {
	withSpec := func(d *appsv1.Deployment, replicas int32) *appsv1.Deployment {
		d.Spec.Replicas = &replicas
		return d
	}
	tests := []struct {
		name  string
		cache *cachev1beta1.RedisCache
		obs   observation
		want  time.Duration
	}{
		{"ready: nothing to wait for", cacheWith(2, 1), observation{deployment: withSpec(deploymentWith(1, 1, 2, 2, 2), 2)}, 0},
		{"pods not ready yet: the Deployment watch reports them, a long safety net", cacheWith(2, 1), observation{deployment: withSpec(deploymentWith(1, 1, 2, 2, 1), 2)}, readinessSafetyNet},
		{"scaled down, Deployment status never written: no poll", cacheWith(0, 1), observation{deployment: withSpec(deploymentWith(1, 0, 0, 0, 0), 0)}, 0},
		{"scaling down, pods still stopping: no poll", cacheWith(0, 2), observation{deployment: withSpec(deploymentWith(2, 1, 2, 2, 2), 0)}, 0},
		{"stopped by an error: its class decides", cacheWith(1, 1), observation{err: errclass.Stalled(ReasonInvalidSpec, "bad")}, 0},
	}
	// Issue 13: 1,000 caches waiting for their pods at rest cost at most one reconcile per second.
	if perSecond := 1000 / readinessSafetyNet.Seconds(); perSecond > 1 {
		t.Errorf("1,000 not-Ready caches are reconciled %.1f times a second at rest (safety net %v), want at most 1", perSecond, readinessSafetyNet)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := requeueAfter(computeStatus(tt.cache, tt.obs), tt.obs); got != tt.want {
				t.Errorf("requeueAfter = %v, want %v", got, tt.want)
			}
		})
	}
}
