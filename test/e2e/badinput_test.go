//go:build e2e

package e2e

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// pollPeriod is how often the operator re-checks a PVCBackup waiting for a missing dependency
// (docs/backup-restore.md: "re-checked every 30 s").
const pollPeriod = 30 * time.Second

// TestBadInputGivesConditionsWithoutHotLoop applies bad PVCBackups for real: the CRD's validation
// refuses what it can at admission, and each other mistake ends in its documented Ready reason,
// starts no run, uploads nothing and leaks no secret, while the operator's own reconcile counter
// (controller_runtime_reconcile_total, read from its metrics endpoint) stays within the documented
// re-check rate.
func TestBadInputGivesConditionsWithoutHotLoop(t *testing.T) {
	ns := namespace(t, "e2e-badinput")
	s3 := deployMinIO(t, ns)
	claim(t, ns, "data")
	must(t, k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wrong-secret"},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": s3.accessKey, "AWS_SECRET_ACCESS_KEY": "not-the-secret-key"}}))
	// A Service without endpoints: kube-proxy rejects connections to it.
	nowhere := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nowhere"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "nothing"}, Ports: []corev1.ServicePort{{Port: 9000}}}}
	must(t, k8s.Create(ctx, nowhere))

	backup := func(name, schedule, pvc, secret, endpoint, bucket string) *unstructured.Unstructured {
		return object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCBackup
metadata: {name: %s, namespace: %s}
spec:
  pvcName: %s
  schedule: %q
  trigger: {manual: now}
  s3Bucket: %s
  s3: {endpoint: %q, insecure: true, credentialsSecretRef: {name: %s}}
`, name, ns, pvc, schedule, bucket, endpoint, secret))
	}

	t.Run("admission refuses a schedule that is not cron", func(t *testing.T) {
		err := k8s.Create(ctx, backup("not-cron", "every day", "data", s3.secret, s3.endpoint, s3.bucket))
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "schedule must be five cron fields") {
			t.Fatalf("want Invalid mentioning the schedule, got %v", err)
		}
	})

	scraper := metricsScraper(t)
	before := scraper.reconciles(t, "pvcbackup")
	created := time.Now()
	tests := []struct {
		name    string
		backup  *unstructured.Unstructured
		reason  string
		stalled bool // not retried at all, versus re-checked every pollPeriod
	}{
		{"invalid cron", backup("invalid-cron", "61 * * * *", "data", s3.secret, s3.endpoint, s3.bucket), "InvalidSchedule", true},
		{"missing PVC", backup("missing-pvc", "0 2 * * *", "nope", s3.secret, s3.endpoint, s3.bucket), "PVCNotFound", false},
		{"missing Secret", backup("missing-secret", "0 2 * * *", "data", "nope", s3.endpoint, s3.bucket), "CredentialsNotFound", false},
		{"wrong secret key", backup("wrong-secret", "0 2 * * *", "data", "wrong-secret", s3.endpoint, s3.bucket), "CredentialsRejected", false},
		{"missing bucket", backup("missing-bucket", "0 2 * * *", "data", s3.secret, s3.endpoint, "no-such-bucket"), "BucketNotFound", false},
		{"unreachable endpoint", backup("unreachable", "0 2 * * *", "data", s3.secret, nowhereEndpoint(t, nowhere), s3.bucket), "EndpointUnreachable", false},
	}
	for _, tt := range tests {
		must(t, k8s.Create(ctx, tt.backup))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *unstructured.Unstructured
			eventually(t, tt.name+": Ready reason "+tt.reason, 2*time.Minute, func() (bool, string) {
				got = get(t, tt.backup)
				_, reason, _ := condition(got, "Ready")
				return reason == tt.reason, statusJSON(got)
			})
			status, _, msg := condition(got, "Ready")
			t.Logf("Ready=%s %s: %s", status, tt.reason, msg)
			if status != "False" {
				t.Errorf("Ready=%s, want False", status)
			}
			if strings.Contains(msg, s3.secretKey) || strings.Contains(statusJSON(got), s3.secretKey) {
				t.Errorf("the secret key leaked into the status")
			}
			if run := str(got, "status", "activeRun"); run != "" {
				t.Errorf("a run started despite %s: %s", tt.reason, run)
			}
		})
	}
	if t.Failed() {
		return
	}

	t.Run("no hot loop", func(t *testing.T) {
		// Watch the counter over more than one re-check period after every condition is set.
		time.Sleep(pollPeriod + 10*time.Second)
		n := scraper.reconciles(t, "pvcbackup") - before
		elapsed := time.Since(created)
		polls := int(math.Ceil(elapsed.Seconds() / pollPeriod.Seconds()))
		limit := 0
		for _, tt := range tests {
			if tt.stalled {
				limit += 3 // create, the status write it causes, one in flight
			} else {
				limit += 3 + polls
			}
		}
		t.Logf("%d PVCBackup reconciles in %s for %d bad PVCBackups (limit %d)", n, elapsed.Round(time.Second), len(tests), limit)
		if n > limit {
			t.Errorf("%d reconciles in %s for %d bad PVCBackups, more than %d: a retry loop", n, elapsed.Round(time.Second), len(tests), limit)
		}
		if keys := s3.keys(t, ""); len(keys) != 0 {
			t.Errorf("bad input uploaded objects: %v", keys)
		}
	})
}

// nowhereEndpoint is the ClusterIP:port of a Service without endpoints.
func nowhereEndpoint(t *testing.T, svc *corev1.Service) string {
	t.Helper()
	got := &corev1.Service{}
	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(svc), got))
	return fmt.Sprintf("%s:%d", got.Spec.ClusterIP, got.Spec.Ports[0].Port)
}
