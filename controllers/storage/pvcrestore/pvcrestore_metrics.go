package pvcrestore

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
)

// restoreFailedGauge is 1 for each PVCRestore that ended Failed, for as long as it exists: a
// restore runs once, so the failure stands until someone reads it, fixes the cause and creates a
// new PVCRestore (deleting the failed one ends the series). The OkgoesRestoreFailed alert reads it.
var restoreFailedGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "okgoes_restore_failed",
	Help: "1 for a PVCRestore that ended Failed, with the reason of its Complete condition; no series for the others.",
}, []string{"namespace", "name", "reason"})

func init() {
	metrics.Registry.MustRegister(restoreFailedGauge)
}

// observeRestore sets the series of pr from its status: one while it is Failed, none otherwise.
func observeRestore(pr *storagev1.PVCRestore) {
	forgetRestore(types.NamespacedName{Namespace: pr.Namespace, Name: pr.Name})
	if pr.Status.Phase != storagev1.RestoreFailed {
		return
	}
	reason := ""
	if c := meta.FindStatusCondition(pr.Status.Conditions, storagev1.ConditionComplete); c != nil {
		reason = c.Reason
	}
	restoreFailedGauge.WithLabelValues(pr.Namespace, pr.Name, reason).Set(1)
}

// forgetRestore drops the series of a PVCRestore (deleted, or no longer Failed).
func forgetRestore(key types.NamespacedName) {
	restoreFailedGauge.DeletePartialMatch(prometheus.Labels{"namespace": key.Namespace, "name": key.Name})
}
