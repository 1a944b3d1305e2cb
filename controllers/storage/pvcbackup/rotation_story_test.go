package pvcbackup

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

const (
	passwordA = "correct horse battery staple" // the world's credentials Secret's
	passwordB = "the password rotated in"
	keyA      = storagev1.DefaultRepositoryPasswordKey
	keyPrev   = storagev1.DefaultRepositoryPasswordKey + ".previous"
)

// The user rotates the kopia repository password: the Secret's key gets the new password B and
// "<key>.previous" the old one A. The next backup's Job takes the previous password only by an
// optional secretKeyRef, opens the repository with A, changes its password to B, and succeeds;
// status.repository.passwordChangeTime and a PasswordRotated event say so, naming the keys and
// never a password. From then on B alone opens the repository; a later run with ".previous"
// still there rotates nothing again.
func TestKopiaPasswordRotationThroughTheController(t *testing.T) {
	w := newWorld(t)
	events := record.NewFakeRecorder(50)
	w.r.Recorder = events
	pb, src, first := w.KopiaStory("app")
	if res := w.KopiaRun(pb, first, 1, src); !res.Succeeded() {
		t.Fatalf("run 1 with password A: %+v", res)
	}

	w.EditSecret("s3-creds", map[string]string{keyA: passwordB, keyPrev: passwordA})
	w.Clock.Set(first.Add(2*time.Hour + time.Minute))
	w.Reconcile(pb)
	job := w.Job(pb)
	assertPreviousPasswordByOptionalRef(t, job.Spec.Template.Spec.Containers[0].Env)
	res := w.RunMover(job, src)
	w.FinishPod(job, res)
	w.FinishJob(job, res.Succeeded())
	w.Clock.Set(first.Add(2*time.Hour + 2*time.Minute))
	w.Reconcile(pb)
	if run := pb.Status.LastRun; !res.PasswordRotated || run == nil || run.Result != storagev1.RunSucceeded {
		t.Fatalf("run 2 with B and previous A: mover %+v, last run %+v; want a success that rotated the password", res, run)
	}
	rotatedAt := pb.Status.Repository.PasswordChangeTime
	if rotatedAt == nil || !rotatedAt.Time.Equal(first.Add(2*time.Hour+2*time.Minute).Truncate(time.Second)) {
		t.Errorf("status.repository.passwordChangeTime = %v, want the time run 2 was recorded", rotatedAt)
	}
	rotated := eventsWith(events, "Normal PasswordRotated")
	if len(rotated) != 1 || !strings.Contains(rotated[0], `"`+keyPrev+`" no longer opens it: remove it from the Secret`) ||
		!strings.Contains(rotated[0], `Secret "s3-creds"`) {
		t.Errorf("PasswordRotated events = %q, want one naming the Secret and %q", rotated, keyPrev)
	}
	noPasswordIn(t, pb, rotated)
	assertOpens(t, w, pb, passwordB, passwordA)

	// ".previous" left in place: the next run opens with B and rotates nothing.
	if res := w.KopiaRun(pb, first, 3, src); !res.Succeeded() || res.PasswordRotated {
		t.Fatalf("run 3 with B and previous A after the rotation: %+v", res)
	}
	if got := pb.Status.Repository.PasswordChangeTime; got == nil || !got.Equal(rotatedAt) {
		t.Errorf("run 3 moved status.repository.passwordChangeTime to %v, want %v kept", got, rotatedAt)
	}
	if again := eventsWith(events, "Normal PasswordRotated"); len(again) != 0 {
		t.Errorf("run 3 emitted %q", again)
	}
}

// A run that changed the password and then failed (its volume could not be read) still reports
// the rotation: status.repository.passwordChangeTime and a PasswordRotated event; the run itself
// is a failure as it should be.
func TestKopiaRotationByAFailedRunIsReported(t *testing.T) {
	w := newWorld(t)
	events := record.NewFakeRecorder(50)
	w.r.Recorder = events
	pb, src, first := w.KopiaStory("app")
	if res := w.KopiaRun(pb, first, 1, src); !res.Succeeded() {
		t.Fatalf("run 1 with password A: %+v", res)
	}
	w.EditSecret("s3-creds", map[string]string{keyA: passwordB, keyPrev: passwordA})
	res := w.KopiaRun(pb, first, 2, filepath.Join(src, "gone"))
	if res.Succeeded() || !res.PasswordRotated || pb.Status.LastRun.Result != storagev1.RunFailed {
		t.Fatalf("run 2 of a missing volume: mover %+v, last run %+v; want a failure that rotated", res, pb.Status.LastRun)
	}
	if pb.Status.Repository.PasswordChangeTime == nil {
		t.Errorf("status.repository = %+v, want passwordChangeTime set by the failed run", pb.Status.Repository)
	}
	if got := eventsWith(events, "Normal PasswordRotated"); len(got) != 1 {
		t.Errorf("PasswordRotated events = %q, want one", got)
	}
	assertOpens(t, w, pb, passwordB, passwordA)
}

// A wrong pair (neither the key nor "<key>.previous" opens the repository) fails the run with
// Ready=False RepositoryPasswordWrong naming the Secret, both keys and what to do; it changes
// nothing (the repository's password A still opens it), and the PVCBackup waits for its next
// scheduled run instead of retrying.
func TestKopiaWrongPasswordPairIsAConditionAndChangesNothing(t *testing.T) {
	w := newWorld(t)
	pb, src, first := w.KopiaStory("app")
	if res := w.KopiaRun(pb, first, 1, src); !res.Succeeded() {
		t.Fatalf("run 1 with password A: %+v", res)
	}
	const wrongNew, wrongOld = "not the new one", "not the old one"
	w.EditSecret("s3-creds", map[string]string{keyA: wrongNew, keyPrev: wrongOld})
	res := w.KopiaRun(pb, first, 2, src)
	if res.Reason != mover.ReasonRepositoryPasswordWrong {
		t.Fatalf("run 2 with a wrong pair: %+v, want %s", res, mover.ReasonRepositoryPasswordWrong)
	}
	ready := storagetest.Condition(pb, storagev1.ConditionReady)
	t.Logf("what the user sees: Ready=%s %s: %s", ready.Status, ready.Reason, ready.Message)
	for _, want := range []string{"neither the repository password nor the previous one", `Secret "s3-creds" named by spec.s3.credentialsSecretRef`,
		`under "` + keyA + `"`, `under "` + keyPrev + `"`, "the repository was not changed"} {
		if ready.Status != metav1.ConditionFalse || ready.Reason != ReasonRepositoryPasswordWrong || !strings.Contains(ready.Message, want) {
			t.Errorf("Ready = %s %s %q, want False %s saying %q", ready.Status, ready.Reason, ready.Message, ReasonRepositoryPasswordWrong, want)
		}
	}
	for _, p := range []string{wrongNew, wrongOld, passwordA} {
		if b, _ := json.Marshal(pb.Status); strings.Contains(string(b), p) {
			t.Errorf("status holds a password: %s", b)
		}
	}
	assertOpens(t, w, pb, passwordA, wrongNew)
	next, err := time.Parse(time.RFC3339, pb.Status.NextBackup)
	w.Must(err)
	if got, want := w.Reconcile(pb).RequeueAfter, next.Sub(w.Clock.Now()); got < want-time.Second {
		t.Errorf("after the failed run the PVCBackup requeues in %v, want its next scheduled run in %v (no retry loop)", got, want)
	}
	if n := len(w.Jobs()); n != 0 {
		t.Errorf("%d Jobs after the failed run was recorded, want none until the next scheduled run", n)
	}
}

// assertPreviousPasswordByOptionalRef fails t unless env takes the previous repository password
// only from the credentials Secret's "<key>.previous", by an optional secretKeyRef.
func assertPreviousPasswordByOptionalRef(t *testing.T, env []corev1.EnvVar) {
	t.Helper()
	for _, e := range env {
		if e.Name != mover.EnvKopiaPreviousPassword {
			continue
		}
		ref := e.ValueFrom
		if e.Value != "" || ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "s3-creds" ||
			ref.SecretKeyRef.Key != keyPrev || ref.SecretKeyRef.Optional == nil || !*ref.SecretKeyRef.Optional {
			t.Errorf("env %s = %+v, want only an optional secretKeyRef to s3-creds %q", e.Name, e, keyPrev)
		}
		return
	}
	t.Errorf("the backup Job has no %s", mover.EnvKopiaPreviousPassword)
}

// assertOpens fails t unless the PVCBackup's repository opens with opens and not with refused.
func assertOpens(t *testing.T, w *world, pb *storagev1.PVCBackup, opens, refused string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := kopiarepo.S3Config{Config: objectstore.Config{Endpoint: w.MinIO.Endpoint, Bucket: storagetest.Bucket, Insecure: true,
		AccessKey: w.MinIO.AccessKey, SecretKey: w.MinIO.SecretKey}, Prefix: storagekit.KopiaPrefix(storagekit.BackupPrefix(pb))}
	r, err := kopiarepo.Open(ctx, cfg, opens, kopiarepo.Options{NoCreate: true, NoDiskCache: true})
	if err != nil {
		t.Fatalf("the repository does not open with the password it should have: %v", err)
	}
	r.Close(ctx)
	if r, err := kopiarepo.Open(ctx, cfg, refused, kopiarepo.Options{NoCreate: true, NoDiskCache: true}); !errors.Is(err, kopiarepo.ErrWrongPassword) {
		if err == nil {
			r.Close(ctx)
		}
		t.Fatalf("open with a password the repository should refuse: %v, want ErrWrongPassword", err)
	}
}

// eventsWith drains events and returns those that start with prefix.
func eventsWith(events *record.FakeRecorder, prefix string) []string {
	var got []string
	for {
		select {
		case e := <-events.Events:
			if strings.HasPrefix(e, prefix) {
				got = append(got, e)
			}
		default:
			return got
		}
	}
}

// noPasswordIn fails t when the status of pb or an event holds one of the story's passwords.
func noPasswordIn(t *testing.T, pb *storagev1.PVCBackup, events []string) {
	t.Helper()
	b, _ := json.Marshal(pb.Status)
	for _, p := range []string{passwordA, passwordB} {
		if strings.Contains(string(b), p) || strings.Contains(strings.Join(events, "\n"), p) {
			t.Errorf("a password is in the status or an event: %s %q", b, events)
		}
	}
}
