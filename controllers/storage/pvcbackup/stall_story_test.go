package pvcbackup

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// While the running mover's progress report (written to S3 every 15 s) is more than a minute
// old, the Running condition says Stalled, with the report's time and what that may mean, and
// goes back to Uploading when a fresh report arrives. The run used to show Uploading for as long
// as S3 stayed frozen.
func TestAStalledRunSaysSo(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("frozen", "@hourly")
	pb.Spec.Mover = &storagev1.MoverOptions{StorageIdleTimeout: &metav1.Duration{Duration: 90 * time.Second}}
	first := w.CreateHourly(pb)
	w.Clock.Set(first.Add(time.Minute))
	w.Reconcile(pb)
	job := w.Job(pb)
	if env := envOf(job); env[mover.EnvIdleTimeout] != "1m30s" {
		t.Errorf("the mover's idle timeout is %q, want spec.mover.storageIdleTimeout 1m30s", env[mover.EnvIdleTimeout])
	}
	w.moverPod(job, corev1.PodRunning, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
	report := func(at time.Time) {
		data, _ := json.Marshal(mover.Progress{Time: at, HashedBytes: 1 << 20, UploadedBytes: 1 << 19})
		w.PutObject(storagekit.ProgressKey(storagekit.BackupPrefix(pb), pb.Status.ActiveRun.ID), data)
	}

	report(w.Clock.Now().Add(-2 * time.Minute))
	w.Reconcile(pb)
	c := storagetest.Condition(pb, storagev1.ConditionRunning)
	if c.Status != metav1.ConditionTrue || c.Reason != ReasonStalled || !strings.Contains(c.Message, "2m0s ago") ||
		!strings.Contains(c.Message, "storageIdleTimeout (1m30s)") {
		t.Fatalf("Running with a 2-minute-old progress report = %s/%s %q, want Stalled naming the report's age and the idle timeout", c.Status, c.Reason, c.Message)
	}

	report(w.Clock.Now())
	w.Reconcile(pb)
	if c := storagetest.Condition(pb, storagev1.ConditionRunning); c.Reason != ReasonUploading {
		t.Fatalf("Running with a fresh progress report = %s %q, want Uploading", c.Reason, c.Message)
	}
}

// What a backup found and could not keep (a socket, with the archive engine) is counted in the
// run's record and named in a Warning event, never dropped silently.
func TestSkippedEntriesAreRecordedAndWarned(t *testing.T) {
	w := newWorld(t)
	events := record.NewFakeRecorder(20)
	w.r.Recorder = events
	pb := w.Backup("sockets", "@hourly")
	w.Create(pb)
	w.Reconcile(pb)
	dir := storagetest.Volume(t)
	sock, err := net.Listen("unix", filepath.Join(dir, "app.sock"))
	w.Must(err)
	defer sock.Close()
	w.Must(os.WriteFile(filepath.Join(dir, "plain"), []byte("kept"), 0o600))

	w.ScheduledRun(pb, pb.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Hour), 0, dir)
	run := pb.Status.LastRun
	if run == nil || run.Result != storagev1.RunSucceeded || run.SkippedEntries != 1 || !strings.Contains(run.Message, "1 entries") {
		t.Fatalf("last run = %+v, want Succeeded with 1 skipped entry named", run)
	}
	for {
		select {
		case e := <-events.Events:
			if strings.HasPrefix(e, "Warning EntriesSkipped") {
				return
			}
		default:
			t.Fatal("no Warning event EntriesSkipped")
		}
	}
}
