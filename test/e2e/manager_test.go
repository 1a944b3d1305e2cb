//go:build e2e

package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// managerPod is the running manager pod (there is one replica).
func managerPod(t *testing.T) corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	must(t, k8s.List(ctx, &pods, client.InNamespace(cfg.operatorNS), client.MatchingLabels{"control-plane": "controller-manager"}))
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			return p
		}
	}
	t.Fatalf("no running manager pod in %s (%d pods)", cfg.operatorNS, len(pods.Items))
	return corev1.Pod{}
}

// TestManagerIsDeployed: after `make deploy` the manager runs as a real pod under the restricted Pod
// Security Standard, is ready, holds the leader election Lease, and serves metrics only to an
// identity the API server authenticates and authorizes.
func TestManagerIsDeployed(t *testing.T) {
	pod := managerPod(t)
	if !podReady(&pod) {
		t.Fatalf("manager pod %s is not ready: %+v", pod.Name, pod.Status.Conditions)
	}
	if got := pod.Spec.Containers[0].Image; got != cfg.operatorImage {
		t.Errorf("manager image = %s, want %s (IMG of make deploy)", got, cfg.operatorImage)
	}
	var ns corev1.Namespace
	must(t, k8s.Get(ctx, client.ObjectKey{Name: cfg.operatorNS}, &ns))
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace %s enforces %q, want restricted", cfg.operatorNS, ns.Labels["pod-security.kubernetes.io/enforce"])
	}

	t.Run("leader election lease held by the pod", func(t *testing.T) {
		eventually(t, "lease okgoes-operator.okgoes.com held by "+pod.Name, time.Minute, func() (bool, string) {
			var lease coordinationv1.Lease
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: cfg.operatorNS, Name: "okgoes-operator.okgoes.com"}, &lease); err != nil {
				return false, err.Error()
			}
			holder := ""
			if lease.Spec.HolderIdentity != nil {
				holder = *lease.Spec.HolderIdentity
			}
			return strings.HasPrefix(holder, pod.Name+"_"), "holder " + holder
		})
	})

	t.Run("metrics need an authorized token", func(t *testing.T) {
		s := metricsScraper(t)
		for _, tt := range []struct {
			who   string
			token string
			want  int // 0: any refusal
		}{
			{"anonymous", "", http.StatusUnauthorized},
			{"a ServiceAccount without metrics-reader", s.nobody, http.StatusForbidden},
			// controller-runtime's filter answers 500, not 401, when the TokenReview rejects a token.
			{"a forged token", "not-a-token", 0},
			{"a ServiceAccount bound to metrics-reader", s.reader, http.StatusOK},
		} {
			code, body, err := s.get(tt.token)
			if err != nil {
				t.Fatalf("%s: %v", tt.who, err)
			}
			switch {
			case tt.want == 0 && code < 400:
				t.Errorf("%s: HTTP %d, want a refusal", tt.who, code)
			case tt.want != 0 && code != tt.want:
				t.Errorf("%s: HTTP %d, want %d", tt.who, code, tt.want)
			}
			if code != http.StatusOK && strings.Contains(body, "controller_runtime_") {
				t.Errorf("%s got metrics with HTTP %d", tt.who, code)
			}
			if code == http.StatusOK {
				// workqueue_* and okgoes_* series appear with the first object (see the RedisCache test).
				for _, series := range []string{"controller_runtime_reconcile_total", "leader_election_master_status{name=\"okgoes-operator.okgoes.com\"} 1"} {
					if !strings.Contains(body, series) {
						t.Errorf("metrics lack %s", series)
					}
				}
			}
		}
	})
}
