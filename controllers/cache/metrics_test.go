package cache

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
)

// okgoes_rediscache_primary_available follows the PrimaryAvailable condition (alert
// OkgoesRedisNoPrimary): 1 with a primary, 0 without, no series for a cache without the
// condition (Standalone, or scaled to 0) and none once the cache is deleted.
func TestPrimaryAvailableGaugeFollowsTheCondition(t *testing.T) {
	rc := &cachev1beta1.RedisCache{ObjectMeta: metav1.ObjectMeta{Namespace: "metrics-ns", Name: "repl"}}
	count := func() int {
		return testutil.CollectAndCount(primaryAvailableGauge, "okgoes_rediscache_primary_available")
	}
	before := count()
	for _, c := range []struct {
		status metav1.ConditionStatus
		want   float64
	}{{metav1.ConditionTrue, 1}, {metav1.ConditionFalse, 0}} {
		rc.Status.Conditions = []metav1.Condition{{Type: cachev1beta1.ConditionPrimaryAvailable, Status: c.status, Reason: "R"}}
		observeMetrics(rc)
		if got := testutil.ToFloat64(primaryAvailableGauge.WithLabelValues("metrics-ns", "repl")); got != c.want {
			t.Errorf("PrimaryAvailable=%s: gauge %v, want %v", c.status, got, c.want)
		}
	}
	rc.Status.Conditions = nil
	observeMetrics(rc)
	if n := count(); n != before {
		t.Errorf("%d series without the condition, want %d", n, before)
	}
	rc.Status.Conditions = []metav1.Condition{{Type: cachev1beta1.ConditionPrimaryAvailable, Status: metav1.ConditionTrue, Reason: "R"}}
	observeMetrics(rc)
	forgetMetrics(types.NamespacedName{Namespace: "metrics-ns", Name: "repl"})
	if n := count(); n != before {
		t.Errorf("%d series after the cache was deleted, want %d", n, before)
	}
}
