package cache

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
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
)

func init() {
	metrics.Registry.MustRegister(readyReplicasGauge, desiredReplicasGauge, readyGauge, replicationLagGauge)
}

func observeMetrics(rc *cachev1beta1.RedisCache) {
	readyReplicasGauge.WithLabelValues(rc.Namespace, rc.Name).Set(float64(rc.Status.ReadyReplicas))
	desiredReplicasGauge.WithLabelValues(rc.Namespace, rc.Name).Set(float64(desiredReplicas(rc)))
	ready := 0.0
	if meta.IsStatusConditionTrue(rc.Status.Conditions, cachev1beta1.ConditionReady) {
		ready = 1
	}
	readyGauge.WithLabelValues(rc.Namespace, rc.Name).Set(ready)
}

// observeReplicationMetrics sets the lag series of the replicas this reconcile read; replicas
// it could not read (or that are gone) have none.
func observeReplicationMetrics(rc *cachev1beta1.RedisCache, obs *replicationObservation) {
	replicationLagGauge.DeletePartialMatch(prometheus.Labels{"namespace": rc.Namespace, "name": rc.Name})
	if obs == nil {
		return
	}
	for pod, lag := range obs.lag {
		replicationLagGauge.WithLabelValues(rc.Namespace, rc.Name, pod).Set(float64(lag))
	}
}

// forgetMetrics drops the series of a deleted RedisCache so no stale cache is reported.
func forgetMetrics(key types.NamespacedName) {
	for _, g := range []*prometheus.GaugeVec{readyReplicasGauge, desiredReplicasGauge, readyGauge} {
		g.DeleteLabelValues(key.Namespace, key.Name)
	}
	replicationLagGauge.DeletePartialMatch(prometheus.Labels{"namespace": key.Namespace, "name": key.Name})
}
