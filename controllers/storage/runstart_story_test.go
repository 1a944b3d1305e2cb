package storage

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
)

// requestLog records the requests of a reconciler: its writes through the client, its uncached
// reads of PVCBackups through the APIReader.
type requestLog struct {
	mu       sync.Mutex
	requests []string
}

func (l *requestLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests = append(l.requests, fmt.Sprintf(format, args...))
}

func (l *requestLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.requests
	l.requests = nil
	return r
}

// loggedReconciler is the world's reconciler with its requests logged.
func (w *world) loggedReconciler(log *requestLog) *PVCBackupReconciler {
	live, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	w.must(err)
	c := interceptor.NewClient(live, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*batchv1.Job); ok {
				log.add("create Job")
			}
			return c.Create(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			log.add("patch %s", sub)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	reader := interceptor.NewClient(live, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*storagev1.PVCBackup); ok {
				log.add("uncached get PVCBackup")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	return &PVCBackupReconciler{Client: c, Deps: w.deps(reader), SnapshotsAvailable: true}
}

// When a run is due, the reconcile records it in the status, locked on the copy it decided
// from, and only then creates its Job: two requests, no uncached read of the PVCBackup first
// (issue 13: 1,000 runs due the same minute), and nothing more at the end of the reconcile.
func TestARunIsRecordedBeforeItsJobIsCreated(t *testing.T) {
	w := newWorld(t)
	log := &requestLog{}
	w.r = w.loggedReconciler(log)
	pb := w.backup("nightly", "0 * * * *")
	w.create(pb)
	w.reconcile(pb)
	log.take()

	tick := pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour)
	w.clock.Set(tick.Add(time.Second))
	w.reconcile(pb)
	if got := log.take(); fmt.Sprint(got) != "[patch status create Job]" {
		t.Errorf("requests of the run start: %q, want the status patch, then the Job's create", got)
	}
	if pb.Status.ActiveRun == nil || len(w.jobs()) != 1 {
		t.Fatalf("at the tick: active=%+v jobs=%d", pb.Status.ActiveRun, len(w.jobs()))
	}
	if c := condition(pb, storagev1.ConditionRunning); c.Reason != ReasonUploading {
		t.Errorf("Running = %+v", c)
	}
	w.reconcile(pb) // the run is followed: nothing to write, nothing to create
	if got := log.take(); len(got) != 0 || len(w.jobs()) != 1 {
		t.Errorf("the reconcile after the start: %q, %d Jobs", got, len(w.jobs()))
	}
}

// A run decided from a copy older than the API server's (here: the user suspended the backup
// just before the tick, and the cache has not seen it) is neither recorded nor started.
func TestARunIsNotStartedFromAStaleCopy(t *testing.T) {
	w := newWorld(t)
	pb := w.backup("nightly", "0 * * * *")
	w.create(pb)
	w.reconcile(pb)
	stale := pb.DeepCopy()
	pb.Spec.Suspend = true
	w.must(k8s.Update(testCtx, pb))
	suspended := pb.ResourceVersion

	tick := pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour)
	w.clock.Set(tick.Add(time.Second))
	r := &PVCBackupReconciler{Client: laggingCache(t, stale), Deps: w.deps(k8s), SnapshotsAvailable: true}
	res, err := r.Reconcile(testCtx, reqFor(pb))
	if err != nil || res.RequeueAfter == 0 {
		t.Errorf("reconcile from a stale copy: %+v, %v; want a requeue and no error", res, err)
	}
	if jobs := w.jobs(); len(jobs) != 0 {
		t.Errorf("a Job was created from the stale copy: %s", jobs[0].Name)
	}
	w.must(k8s.Get(testCtx, client.ObjectKeyFromObject(pb), pb))
	if pb.ResourceVersion != suspended || pb.Status.ActiveRun != nil {
		t.Errorf("the stale copy's run was recorded: %+v", pb.Status)
	}
}
