package cache

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
)

// Per-cache gauges, served next to controller-runtime's controller_runtime_reconcile_* and
// workqueue_* series on the manager's metrics endpoint.
var (
	readyReplicasGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "okgoes_rediscache_ready_replicas",
		Help: "Ready Redis pods of a RedisCache.",
	}, []string{"namespace", "name"})
	desiredReplicasGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "okgoes_rediscache_desired_replicas",
		Help: "Redis pods a RedisCache asks for (spec.replicas).",
	}, []string{"namespace", "name"})
	replicationLagGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "okgoes_rediscache_replication_lag_bytes",
		Help: "How far a replica of a RedisCache in Replication mode is behind its primary's replication offset, as last read by the operator.",
	}, []string{"namespace", "name", "pod"})
	readyGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "okgoes_rediscache_ready",
		Help: "1 when the Ready condition of a RedisCache is True, else 0.",
	}, []string{"namespace", "name"})
	primaryAvailableGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "okgoes_rediscache_primary_available",
		Help: "Replication mode: 1 when the PrimaryAvailable condition of a RedisCache is True, else 0; no series in Standalone mode or at replicas 0.",
	}, []string{"namespace", "name"})
	failoversCounter = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "okgoes_rediscache_failovers_total",
		Help: "Replicas of a RedisCache in Replication mode the operator promoted to primary, by the reason of the promotion (status.replication.lastFailover.reason).",
	}, []string{"namespace", "name", "reason"})
	usedMemoryGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "okgoes_rediscache_used_memory_bytes",
		Help: "used_memory of each Redis pod of a RedisCache in Replication mode (INFO memory), as last read by the operator.",
	}, []string{"namespace", "name", "pod"})
	maxMemoryGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "okgoes_rediscache_maxmemory_bytes",
		Help: "maxmemory of each Redis pod of a RedisCache in Replication mode (INFO memory; 0: no limit), as last read by the operator.",
	}, []string{"namespace", "name", "pod"})
	// evictedKeysGauge mirrors a counter of Redis: it only grows, and starts again from 0 when
	// the pod's Redis restarts, which increase() and rate() read as a counter reset.
	evictedKeysGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "okgoes_rediscache_evicted_keys",
		Help: "evicted_keys of each Redis pod of a RedisCache in Replication mode (INFO stats: keys removed to stay under maxmemory since it started), as last read by the operator.",
	}, []string{"namespace", "name", "pod"})

	// perPodGauges are the gauges with a pod label, set from what the last reconcile read.
	perPodGauges = []*prometheus.GaugeVec{replicationLagGauge, usedMemoryGauge, maxMemoryGauge, evictedKeysGauge}
)

// failoverReasons are the reasons a promotion is counted under. They exist at 0 from the first
// reconcile of a cache in Replication mode, so that increase() sees its first failover (a counter
// that appears at 1 has no increase).
var failoverReasons = []string{ReasonNoPrimary, ReasonPrimaryDeleted, ReasonPrimaryRestarted, ReasonPrimaryUnavailable, ReasonScaleDown}

func init() {
	metrics.Registry.MustRegister(readyReplicasGauge, desiredReplicasGauge, readyGauge, replicationLagGauge,
		primaryAvailableGauge, failoversCounter, usedMemoryGauge, maxMemoryGauge, evictedKeysGauge)
}

func observeMetrics(rc *cachev1beta1.RedisCache) {
	readyReplicasGauge.WithLabelValues(rc.Namespace, rc.Name).Set(float64(rc.Status.ReadyReplicas))
	desiredReplicasGauge.WithLabelValues(rc.Namespace, rc.Name).Set(float64(desiredReplicas(rc)))
	ready := 0.0
	if meta.IsStatusConditionTrue(rc.Status.Conditions, cachev1beta1.ConditionReady) {
		ready = 1
	}
	readyGauge.WithLabelValues(rc.Namespace, rc.Name).Set(ready)
	if c := meta.FindStatusCondition(rc.Status.Conditions, cachev1beta1.ConditionPrimaryAvailable); c != nil {
		available := 0.0
		if c.Status == metav1.ConditionTrue {
			available = 1
		}
		primaryAvailableGauge.WithLabelValues(rc.Namespace, rc.Name).Set(available)
	} else {
		primaryAvailableGauge.DeleteLabelValues(rc.Namespace, rc.Name)
	}
}

// observeReplicationMetrics sets the per-pod series of the pods this reconcile read: lag for the
// replicas, memory and evictions for every pod that answered; pods it could not read (or that
// are gone) have none.
func observeReplicationMetrics(rc *cachev1beta1.RedisCache, obs *replicationObservation) {
	cache := prometheus.Labels{"namespace": rc.Namespace, "name": rc.Name}
	for _, g := range perPodGauges {
		g.DeletePartialMatch(cache)
	}
	if obs == nil {
		return
	}
	for _, reason := range failoverReasons {
		failoversCounter.WithLabelValues(rc.Namespace, rc.Name, reason)
	}
	for pod, lag := range obs.lag {
		replicationLagGauge.WithLabelValues(rc.Namespace, rc.Name, pod).Set(float64(lag))
	}
	for pod, in := range obs.servers {
		usedMemoryGauge.WithLabelValues(rc.Namespace, rc.Name, pod).Set(float64(in.UsedMemory))
		maxMemoryGauge.WithLabelValues(rc.Namespace, rc.Name, pod).Set(float64(in.MaxMemory))
		evictedKeysGauge.WithLabelValues(rc.Namespace, rc.Name, pod).Set(float64(in.EvictedKeys))
	}
}

// countFailover counts a promotion the operator made (f, as recorded on the new primary's pod).
func countFailover(rc *cachev1beta1.RedisCache, f cachev1beta1.Failover) {
	failoversCounter.WithLabelValues(rc.Namespace, rc.Name, f.Reason).Inc()
}

// forgetMetrics drops the series of a deleted RedisCache so no stale cache is reported.
func forgetMetrics(key types.NamespacedName) {
	for _, g := range []*prometheus.GaugeVec{readyReplicasGauge, desiredReplicasGauge, readyGauge, primaryAvailableGauge} {
		g.DeleteLabelValues(key.Namespace, key.Name)
	}
	cache := prometheus.Labels{"namespace": key.Namespace, "name": key.Name}
	for _, g := range perPodGauges {
		g.DeletePartialMatch(cache)
	}
	failoversCounter.DeletePartialMatch(cache)
}
