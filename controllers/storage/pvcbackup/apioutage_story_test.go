package pvcbackup

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// A scheduled time comes while the cache still shows the run's Job running, though it ended (the
// Jobs informer has not relisted after an API server outage): the tick is not counted as
// skipped on the cache's word. The Job is read from the API server, the run is recorded, and the
// tick is then handled like any tick after a run.
func TestATickIsNotSkippedForARunWhoseJobEndedUnseen(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("hourly", "0 * * * *")
	w.StartManual(pb, "now")
	job := w.Job(pb)
	stale, runID := job.DeepCopy(), pb.Status.ActiveRun.ID
	res := w.RunMover(job, storagetest.Volume(t))
	if !res.Succeeded() {
		t.Fatalf("mover: %+v", res)
	}
	w.FinishPod(job, res)
	w.FinishJob(job, true)

	tick := pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour)
	w.Clock.Set(tick.Add(30 * time.Second))
	w.r.Client = storagetest.LaggingCache(t, stale)
	w.Reconcile(pb)
	if pb.Status.SkippedSchedules != 0 {
		t.Errorf("skippedSchedules = %d: the tick was counted as overlapping a run whose Job had ended", pb.Status.SkippedSchedules)
	}
	if pb.Status.LastRun == nil || pb.Status.LastRun.ID != runID || pb.Status.LastRun.Result != storagev1.RunSucceeded {
		t.Fatalf("the ended run was not recorded: last %+v, active %+v", pb.Status.LastRun, pb.Status.ActiveRun)
	}
}

// After an API server outage (a broken watch, a failed request), the cache may show a run's Job
// running for up to a minute after the API is back, until the Jobs informer relists: a reconcile
// then reads the Job from the API server, and records the run whose Job ended during the outage
// at once; and until the outage is storagekit.APIOutageMemory old, an active run is looked at every APIRetry,
// since no Job event may come before the relist.
func TestARunIsRecordedAfterAnOutageWithoutWaitingForTheInformer(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("daily", "@daily")
	w.StartManual(pb, "now")
	job := w.Job(pb)
	stale, runID := job.DeepCopy(), pb.Status.ActiveRun.ID

	w.r.Outages = &storagekit.APIOutages{}
	w.r.Outages.Observe(w.Clock.Now()) // a watch broke: the API server went away
	w.Clock.Set(w.Clock.Now().Add(20 * time.Second))
	if res := w.Reconcile(pb); res.RequeueAfter > storagekit.APIRetry {
		t.Errorf("an active run after an outage is looked at again in %s, want within %s", res.RequeueAfter, storagekit.APIRetry)
	}
	res := w.RunMover(job, storagetest.Volume(t))
	if !res.Succeeded() {
		t.Fatalf("mover: %+v", res)
	}
	w.FinishPod(job, res)
	w.FinishJob(job, true)

	w.Clock.Set(w.Clock.Now().Add(storagekit.APIRetry))
	w.r.Client = storagetest.LaggingCache(t, stale)
	w.Reconcile(pb)
	if pb.Status.LastRun == nil || pb.Status.LastRun.ID != runID || pb.Status.LastRun.Result != storagev1.RunSucceeded {
		t.Fatalf("the run whose Job ended during the outage was not recorded: last %+v, active %+v", pb.Status.LastRun, pb.Status.ActiveRun)
	}
}

// APIUnreachable tells an API server that cannot be reached (refused, reset, closed) from one
// that answered, even with an error.
func TestAPIUnreachable(t *testing.T) {
	answered := k8s.Get(testCtx, client.ObjectKey{Namespace: "default", Name: "no-such-job"}, &batchv1.Job{})
	for _, err := range []error{answered, apierrors.NewServiceUnavailable("overloaded"), apierrors.NewTooManyRequests("slow down", 1)} {
		if storagekit.APIUnreachable(err) {
			t.Errorf("an answer counted as unreachable (it keeps the backoff): %v", err)
		}
	}
	dial := func() error {
		addr := closedPort(t)
		c, err := (&net.Dialer{}).DialContext(testCtx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return fmt.Errorf("get mover Job: %w", &url.Error{Op: "Get", URL: "https://" + addr, Err: err})
	}
	for _, err := range []error{dial(), &url.Error{Op: "Patch", URL: "https://127.0.0.1:6443/apis", Err: io.EOF}} {
		if !storagekit.APIUnreachable(err) {
			t.Errorf("not counted as unreachable: %v", err)
		}
	}

	// The cache's watch error handler: an expired watch is routine, a refused list an outage.
	o := &storagekit.APIOutages{}
	reflector := toolscache.NewReflector(nil, &batchv1.Job{}, toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), 0)
	o.WatchErrorHandler(testCtx, reflector, apierrors.NewResourceExpired("too old resource version"))
	if o.Recent(time.Now()) {
		t.Error("an expired watch counted as an outage")
	}
	o.WatchErrorHandler(testCtx, reflector, dial())
	if !o.Recent(time.Now()) || o.Recent(time.Now().Add(storagekit.APIOutageMemory)) {
		t.Error("a refused list is not remembered as an outage for storagekit.APIOutageMemory")
	}
}
