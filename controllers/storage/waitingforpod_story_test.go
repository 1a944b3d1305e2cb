package storage

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
)

// The stories of a mover Job whose pod cannot be created: a namespace whose ResourceQuota (or
// an admission webhook, or Pod Security Admission) refuses the pod. The Job then has no pod at
// all, only the Job controller's FailedCreate event; the status says that, in the Job's own
// words, and never that the backup uploads or the restore restores.

// refuseAllPods gives the world's namespace a ResourceQuota of zero pods, with the status the
// quota controller writes (the API server's quota admission needs it).
func (w *world) refuseAllPods() {
	w.t.Helper()
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "no-pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	w.must(k8s.Create(testCtx, q))
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
	w.must(k8s.Status().Update(testCtx, q))
}

// allowPods removes the quota of refuseAllPods: the pods can be created.
func (w *world) allowPods() {
	w.t.Helper()
	w.must(k8s.Delete(testCtx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "no-pods"}}))
}

// tryCreatePod plays the Job controller: it creates the Job's pod, and when the API server
// refuses it, records the FailedCreate event the Job controller records ("Error creating: ...").
// It returns the API server's refusal.
func (w *world) tryCreatePod(job *batchv1.Job) error {
	w.t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, GenerateName: job.Name + "-",
		Labels: map[string]string{"job-name": job.Name}}, Spec: job.Spec.Template.Spec}
	err := k8s.Create(testCtx, pod)
	if err == nil {
		w.t.Fatal("the API server accepted the mover pod; the story needs it refused")
	}
	now := metav1.Now()
	w.must(k8s.Create(testCtx, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, GenerateName: job.Name + "."},
		InvolvedObject: corev1.ObjectReference{Kind: "Job", APIVersion: "batch/v1", Namespace: job.Namespace,
			Name: job.Name, UID: job.UID, ResourceVersion: job.ResourceVersion},
		Reason: "FailedCreate", Message: "Error creating: " + err.Error(), Type: corev1.EventTypeWarning,
		Source: corev1.EventSource{Component: "job-controller"}, FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}))
	return err
}

// startPod plays the kubelet and the Job controller once the pod can be created: it runs.
func (w *world) startPod(job *batchv1.Job) {
	w.t.Helper()
	labels := map[string]string{"job-name": job.Name}
	for k, v := range job.Spec.Template.Labels {
		labels[k] = v
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-r7x2k", Labels: labels},
		Spec: job.Spec.Template.Spec}
	// The API server's quota admission sees a deleted quota through its own cache: it may refuse
	// the pod for a moment after allowPods.
	deadline := time.Now().Add(10 * time.Second)
	for err := k8s.Create(testCtx, pod); err != nil; err = k8s.Create(testCtx, pod) {
		if !apierrors.IsForbidden(err) || time.Now().After(deadline) {
			w.t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: storagekit.MoverContainer, Image: pod.Spec.Containers[0].Image, Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	w.must(k8s.Status().Update(testCtx, pod))
	now := metav1.Now()
	job.Status.StartTime, job.Status.Active, job.Status.Ready = &now, 1, ptr.To[int32](1)
	w.must(k8s.Status().Update(testCtx, job))
}

// A backup whose mover pod a ResourceQuota refuses is WaitingForPod with the Job controller's
// own words (FailedCreate: exceeded quota), not Uploading until the deadline; once a pod runs,
// it is Uploading.
func TestABackupWhosePodIsRefusedWaitsForItsPod(t *testing.T) {
	w := newWorld(t)
	w.refuseAllPods()
	pb := w.backup("quota", "@daily")
	pb.Spec.Trigger = &storagev1.Trigger{Manual: "once"}
	w.create(pb)
	w.reconcile(pb)
	job := w.job(pb)
	if c := condition(pb, storagev1.ConditionRunning); c.Reason != storagekit.ReasonWaitingForPod || !strings.Contains(c.Message, "has no pod yet") {
		t.Errorf("Running right after the start, no pod yet: %+v, want WaitingForPod saying the Job has no pod yet", c)
	}

	refusal := w.tryCreatePod(job)
	if !apierrors.IsForbidden(refusal) || !strings.Contains(refusal.Error(), "exceeded quota") {
		t.Fatalf("the quota did not refuse the pod: %v", refusal)
	}
	w.clock.Set(w.clock.Now().Add(storagekit.RunPollInterval))
	w.reconcile(pb)
	c := condition(pb, storagev1.ConditionRunning)
	if c.Status != metav1.ConditionTrue || c.Reason != storagekit.ReasonWaitingForPod ||
		!strings.Contains(c.Message, "FailedCreate") || !strings.Contains(c.Message, "exceeded quota") {
		t.Fatalf("Running with the pod refused: %+v, want WaitingForPod naming FailedCreate and the quota", c)
	}
	if pb.Status.ActiveRun == nil {
		t.Fatal("the run ended while it waits for its pod (it ends at its deadline)")
	}

	// The quota is lifted: the pod runs, the backup uploads.
	w.allowPods()
	w.startPod(job)
	w.clock.Set(w.clock.Now().Add(storagekit.RunPollInterval))
	w.reconcile(pb)
	if c := condition(pb, storagev1.ConditionRunning); c.Reason != ReasonUploading {
		t.Errorf("Running with the mover pod running: %+v, want Uploading", c)
	}
}

// A restore's Complete condition always has a message: while its pod is refused it names the
// Job controller's reason, and while the mover runs it names the backup and the target.
func TestARestoreSaysWhatItWaitsForAndWhatItRestores(t *testing.T) {
	w := newWorld(t)
	pb := w.backupNow("app", volume(t))
	w.refuseAllPods()

	pr := newRestore(w.ns, "back", "app")
	w.must(k8s.Create(testCtx, pr))
	w.reconcileRestore(pr)
	if c := condition2(pr); c.Message == "" || c.Reason != storagekit.ReasonWaitingForPod {
		t.Errorf("Complete right after the Job's creation: %+v, want WaitingForPod with a message", c)
	}
	job := w.restoreJob(pr)
	w.tryCreatePod(job)
	w.clock.Set(w.clock.Now().Add(storagekit.RunPollInterval))
	w.reconcileRestore(pr)
	if c := condition2(pr); c.Reason != storagekit.ReasonWaitingForPod || !strings.Contains(c.Message, "exceeded quota") {
		t.Fatalf("Complete with the pod refused: %+v, want WaitingForPod naming the quota", c)
	}

	w.allowPods()
	w.startPod(job)
	w.clock.Set(w.clock.Now().Add(time.Second))
	w.reconcileRestore(pr)
	c := condition2(pr)
	if pr.Status.Phase != storagev1.RestoreRestoring || c.Reason != ReasonRestoring ||
		!strings.Contains(c.Message, pb.Status.LastRun.ID) || !strings.Contains(c.Message, "back-data") {
		t.Fatalf("restore with its mover running: phase %s, Complete %+v; want Restoring naming the backup and the target", pr.Status.Phase, c)
	}
}
