package pvcbackup

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/schedule"
	"github.com/okgoes/okgoes-operator/internal/testenv"
)

func TestAdmissionRejectsInvalidBackups(t *testing.T) {
	w := newWorld(t)
	tests := []struct {
		name    string
		mutate  func(*storagev1.PVCBackup)
		message string
	}{
		{"schedule that is not cron", func(pb *storagev1.PVCBackup) { pb.Spec.Schedule = "every day" }, "schedule must be five cron fields"},
		{"time zone twice", func(pb *storagev1.PVCBackup) {
			pb.Spec.Schedule = "CRON_TZ=Europe/Berlin 0 2 * * *"
			pb.Spec.TimeZone = ptrTo("Europe/Berlin")
		}, "not both"},
		{"bucket name with capitals", func(pb *storagev1.PVCBackup) { pb.Spec.S3Bucket = "My_Bucket" }, "spec.s3Bucket"},
		{"endpoint with a scheme", func(pb *storagev1.PVCBackup) { pb.Spec.S3.Endpoint = "https://s3.example.com" }, "spec.s3.endpoint"},
		{"unknown deletion policy", func(pb *storagev1.PVCBackup) { pb.Spec.DeletionPolicy = "Purge" }, "spec.deletionPolicy"},
		{"negative deadline", func(pb *storagev1.PVCBackup) { pb.Spec.StartingDeadlineSeconds = ptrTo[int64](-1) }, "spec.startingDeadlineSeconds"},
		{"no PVC", func(pb *storagev1.PVCBackup) { pb.Spec.PVCName = "" }, "spec.pvcName"},
		{"a deadline of 31,000 years", func(pb *storagev1.PVCBackup) {
			pb.Spec.Mover = &storagev1.MoverOptions{ActiveDeadlineSeconds: ptrTo[int64](1_000_000_000_000)}
		}, "spec.mover.activeDeadlineSeconds"},
		{"a storage idle timeout of 5 seconds", func(pb *storagev1.PVCBackup) {
			pb.Spec.Mover = &storagev1.MoverOptions{StorageIdleTimeout: &metav1.Duration{Duration: 5 * time.Second}}
		}, "storageIdleTimeout must be a duration from 10s to 1h"},
		{"a storage idle timeout of 2 hours", func(pb *storagev1.PVCBackup) {
			pb.Spec.Mover = &storagev1.MoverOptions{StorageIdleTimeout: &metav1.Duration{Duration: 2 * time.Hour}}
		}, "storageIdleTimeout must be a duration from 10s to 1h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pb := w.Backup("bad", "@daily")
			tt.mutate(pb)
			err := k8s.Create(testCtx, pb)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.message) {
				t.Fatalf("want Invalid mentioning %q, got %v", tt.message, err)
			}
		})
	}
	if err := k8s.Create(testCtx, w.Backup("good", "CRON_TZ=Europe/Berlin 0 2 * * *")); err != nil {
		t.Fatalf("valid backup rejected: %v", err)
	}
}

// TestBadInputBecomesConditionsWithoutHotLoop runs the controller under a real manager (real
// clock, watches, rate limiter) and applies each kind of bad input for real: each ends in its own
// precise condition, the reconcile count stays bounded, and nothing reaches S3.
func TestBadInputBecomesConditionsWithoutHotLoop(t *testing.T) {
	w := newWorld(t)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	w.Must(err)
	deps := w.Deps(mgr.GetAPIReader())
	deps.Clock = schedule.RealClock{} // the manager runs on real time here
	r := &PVCBackupReconciler{Client: mgr.GetClient(), Deps: deps, SnapshotsAvailable: true}
	var counter testenv.ReconcileCounter
	w.Must(r.SetupWithManager(mgr, storagekit.Options{MaxConcurrentReconciles: 4, Wrap: counter.Wrap}))
	ctx, cancel := context.WithCancel(testCtx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	closed := closedPort(t)
	w.Must(k8s.Create(testCtx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "wrong-keys"},
		StringData: map[string]string{"access": "x", "secret": "y"}}))
	w.Must(k8s.Create(testCtx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "wrong-secret"},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": w.MinIO.AccessKey, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}}))
	tests := []struct {
		name   string
		mutate func(*storagev1.PVCBackup)
		reason string
	}{
		{"invalid cron", func(pb *storagev1.PVCBackup) { pb.Spec.Schedule = "61 * * * *" }, ReasonInvalidSchedule},
		{"unknown time zone", func(pb *storagev1.PVCBackup) { pb.Spec.TimeZone = ptrTo("Mars/Olympus") }, ReasonInvalidSchedule},
		{"missing PVC", func(pb *storagev1.PVCBackup) { pb.Spec.PVCName = "nope" }, ReasonPVCNotFound},
		{"missing Secret", func(pb *storagev1.PVCBackup) { pb.Spec.S3.CredentialsSecretRef.Name = "nope" }, storagekit.ReasonCredentialsNotFound},
		{"wrong keys", func(pb *storagev1.PVCBackup) { pb.Spec.S3.CredentialsSecretRef.Name = "wrong-keys" }, storagekit.ReasonCredentialsNotFound},
		{"wrong secret key", func(pb *storagev1.PVCBackup) { pb.Spec.S3.CredentialsSecretRef.Name = "wrong-secret" }, storagekit.ReasonCredentialsRejected},
		{"unreachable endpoint", func(pb *storagev1.PVCBackup) { pb.Spec.S3.Endpoint = closed }, storagekit.ReasonEndpointUnreachable},
		{"missing bucket", func(pb *storagev1.PVCBackup) { pb.Spec.S3Bucket = "no-such-bucket" }, storagekit.ReasonBucketNotFound},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pb := w.Backup(fmt.Sprintf("bad-%d", i), "@daily")
			pb.Spec.Trigger = &storagev1.Trigger{Manual: "now"} // a run is due at once
			tt.mutate(pb)
			w.Must(k8s.Create(testCtx, pb))
			var got storagev1.PVCBackup
			err := wait.PollUntilContextTimeout(testCtx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				if err := k8s.Get(testCtx, client.ObjectKeyFromObject(pb), &got); err != nil {
					return false, err
				}
				return storagetest.Condition(&got, storagev1.ConditionReady).Reason == tt.reason, nil
			})
			if err != nil {
				t.Fatalf("Ready = %+v, want reason %s", storagetest.Condition(&got, storagev1.ConditionReady), tt.reason)
			}
			key := client.ObjectKeyFromObject(pb)
			start := counter.Count(key)
			time.Sleep(3 * time.Second)
			n := counter.Count(key) - start
			t.Logf("%s: %q; %d reconciles in 3s (waiting reasons are polled every 1s here, 30s by default)", tt.reason,
				storagetest.Condition(&got, storagev1.ConditionReady).Message, n)
			limit := 4 // three polls, plus one in flight
			if tt.reason == ReasonInvalidSchedule {
				limit = 1 // stalled: not retried at all
			}
			if n > limit {
				t.Errorf("%d reconciles of one bad PVCBackup in 3s: a retry loop", n)
			}
			if strings.Contains(storagetest.Condition(&got, storagev1.ConditionReady).Message, w.MinIO.SecretKey) {
				t.Errorf("the secret key leaked into the condition")
			}
			if got.Status.ActiveRun != nil {
				t.Errorf("a run started despite %s", tt.reason)
			}
		})
	}
	if keys := w.Keys(""); len(keys) != 0 {
		t.Errorf("bad input uploaded objects: %v", keys)
	}
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func ptrTo[T any](v T) *T { return &v }

// A credentials Secret with a key that is there but empty is reported as an empty key, not as a
// missing one ("has no key" sends the user to fix the key's name, "empty" to fix its value); a
// missing key is still reported as missing, and so is the key of a CA bundle Secret, which used
// to pass unnoticed until the mover pod could not mount it.
func TestCredentialsWithAnEmptyKeyAreReportedAsEmpty(t *testing.T) {
	w := newWorld(t)
	w.Secret("empty-access-key", map[string]string{"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "secret"})
	w.Secret("empty-secret-key", map[string]string{"AWS_ACCESS_KEY_ID": w.MinIO.AccessKey, "AWS_SECRET_ACCESS_KEY": ""})
	w.Secret("no-access-key", map[string]string{"AWS_SECRET_ACCESS_KEY": "secret"})
	w.Secret("ca-without-key", map[string]string{"tls.crt": "not a CA bundle"})
	tests := []struct {
		name    string
		mutate  func(*storagev1.PVCBackup)
		message string
	}{
		{"empty access key", func(pb *storagev1.PVCBackup) { pb.Spec.S3.CredentialsSecretRef.Name = "empty-access-key" },
			`Secret "empty-access-key" has an empty key "AWS_ACCESS_KEY_ID"`},
		{"empty secret key", func(pb *storagev1.PVCBackup) { pb.Spec.S3.CredentialsSecretRef.Name = "empty-secret-key" },
			`Secret "empty-secret-key" has an empty key "AWS_SECRET_ACCESS_KEY"`},
		{"missing access key", func(pb *storagev1.PVCBackup) { pb.Spec.S3.CredentialsSecretRef.Name = "no-access-key" },
			`Secret "no-access-key" has no key "AWS_ACCESS_KEY_ID"`},
		{"missing renamed key", func(pb *storagev1.PVCBackup) { pb.Spec.S3.CredentialsSecretRef.AccessKeyIDKey = "access" },
			`Secret "s3-creds" has no key "access"`},
		{"missing Secret", func(pb *storagev1.PVCBackup) { pb.Spec.S3.CredentialsSecretRef.Name = "nope" },
			`Secret "nope" named by spec.s3.credentialsSecretRef does not exist`},
		{"CA bundle Secret without the key", func(pb *storagev1.PVCBackup) {
			pb.Spec.S3.CABundleSecretRef = &storagev1.SecretKeySelector{Name: "ca-without-key"}
		}, `Secret "ca-without-key" has no key "ca.crt"`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pb := w.Backup("creds-"+string(rune('a'+i)), "@daily")
			pb.Spec.Trigger = &storagev1.Trigger{Manual: "now"} // a run is due: the credentials are read
			tt.mutate(pb)
			w.Create(pb)
			w.Reconcile(pb)
			ready := storagetest.Condition(pb, storagev1.ConditionReady)
			if ready.Reason != storagekit.ReasonCredentialsNotFound || ready.Message != tt.message {
				t.Fatalf("Ready = %s %q\nwant   %s %q", ready.Reason, ready.Message, storagekit.ReasonCredentialsNotFound, tt.message)
			}
			if pb.Status.ActiveRun != nil {
				t.Errorf("a run started without usable credentials")
			}
		})
	}
}
