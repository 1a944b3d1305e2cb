package pvcbackup

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// spec.kopia.splitter and spec.kopia.compression reach the mover's environment; the first
// backup creates the repository with the splitter, and status.repository says which it has.
// A spec asking for another splitter later is told, in SplitterApplied, that the repository keeps
// its own and what to do; the backups go on (Ready stays True) and nothing is retried for it
// (the real mover, MinIO).
func TestKopiaSplitterIsKeptByAnExistingRepositoryAndSaysSo(t *testing.T) {
	w := newWorld(t)
	pb, src, first := w.KopiaStory("app", func(pb *storagev1.PVCBackup) {
		pb.Spec.Kopia = &storagev1.KopiaOptions{Splitter: "DYNAMIC-1M-BUZHASH", Compression: "zstd-fastest"}
	})
	w.Clock.Set(first.Add(time.Hour + time.Minute))
	w.Reconcile(pb)
	job := w.Job(pb)
	env := envOf(job)
	if env[mover.EnvKopiaSplitter] != "DYNAMIC-1M-BUZHASH" || env[mover.EnvKopiaCompression] != "zstd-fastest" {
		t.Fatalf("backup Job env %s=%q %s=%q, want DYNAMIC-1M-BUZHASH and zstd-fastest", mover.EnvKopiaSplitter, env[mover.EnvKopiaSplitter],
			mover.EnvKopiaCompression, env[mover.EnvKopiaCompression])
	}
	res := w.RunMover(job, src)
	w.FinishPod(job, res)
	w.FinishJob(job, res.Succeeded())
	w.Clock.Set(first.Add(time.Hour + 2*time.Minute))
	w.Reconcile(pb)
	if r := pb.Status.Repository; r == nil || r.Splitter != "DYNAMIC-1M-BUZHASH" {
		t.Fatalf("status.repository = %+v, want splitter DYNAMIC-1M-BUZHASH", r)
	}
	if c := storagetest.Condition(pb, storagev1.ConditionSplitterApplied); c.Status != metav1.ConditionTrue || c.Reason != ReasonSplitterInUse {
		t.Errorf("SplitterApplied = %s %s %q, want True %s", c.Status, c.Reason, c.Message, ReasonSplitterInUse)
	}

	// Another splitter asked for: said at once, from status alone.
	pb.Spec.Kopia.Splitter = "DYNAMIC-4M-BUZHASH"
	w.Must(k8s.Update(testCtx, pb))
	after := w.Reconcile(pb)
	c := storagetest.Condition(pb, storagev1.ConditionSplitterApplied)
	for _, want := range []string{"asks for DYNAMIC-4M-BUZHASH", "was created with DYNAMIC-1M-BUZHASH", "takes effect only when a repository is created",
		"nothing is retried", "new spec.s3.prefix"} {
		if c.Status != metav1.ConditionFalse || c.Reason != ReasonSplitterMismatch || !strings.Contains(c.Message, want) {
			t.Errorf("SplitterApplied = %s %s %q, want False %s saying %q", c.Status, c.Reason, c.Message, ReasonSplitterMismatch, want)
		}
	}
	if ready := storagetest.Condition(pb, storagev1.ConditionReady); ready.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %s %s %q: a splitter the repository does not have stops no backup", ready.Status, ready.Reason, ready.Message)
	}
	if after.RequeueAfter > 0 && after.RequeueAfter < time.Minute { // the poll of a waiting PVCBackup is 1 s in these tests
		t.Errorf("reconcile after the mismatch requeues after %v: nothing is retried for it (next backup at %s)", after.RequeueAfter, pb.Status.NextBackup)
	}

	// The next backup runs with the repository's splitter, and the condition stays.
	res = w.KopiaRun(pb, first, 2, src)
	if !res.Succeeded() || res.Splitter != "DYNAMIC-1M-BUZHASH" {
		t.Fatalf("run 2 asking for DYNAMIC-4M-BUZHASH: %+v, want success with the repository's DYNAMIC-1M-BUZHASH", res)
	}
	if c := storagetest.Condition(pb, storagev1.ConditionSplitterApplied); c.Reason != ReasonSplitterMismatch {
		t.Errorf("after run 2, SplitterApplied = %s %s %q, want %s", c.Status, c.Reason, c.Message, ReasonSplitterMismatch)
	}

	// Without spec.kopia.splitter there is nothing to apply: no condition.
	pb.Spec.Kopia.Splitter = ""
	w.Must(k8s.Update(testCtx, pb))
	w.Reconcile(pb)
	if c := storagetest.Condition(pb, storagev1.ConditionSplitterApplied); c.Type != "" {
		t.Errorf("without spec.kopia.splitter, SplitterApplied = %s %s %q, want none", c.Status, c.Reason, c.Message)
	}
}
