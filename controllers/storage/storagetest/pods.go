package storagetest

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
)

// The Job controller and kubelet stand-ins of the stories of a mover Job whose pod cannot be
// created (a ResourceQuota of zero pods).

// RefuseAllPods gives the world's namespace a ResourceQuota of zero pods, with the status the
// quota controller writes (the API server's quota admission needs it).
func (w *World) RefuseAllPods() {
	w.T.Helper()
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "no-pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	w.Must(K8s.Create(Ctx, q))
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
	w.Must(K8s.Status().Update(Ctx, q))
}

// AllowPods removes the quota of refuseAllPods: the pods can be created.
func (w *World) AllowPods() {
	w.T.Helper()
	w.Must(K8s.Delete(Ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "no-pods"}}))
}

// TryCreatePod plays the Job controller: it creates the Job's pod, and when the API server
// refuses it, records the FailedCreate event the Job controller records ("Error creating: ...").
// It returns the API server's refusal.
func (w *World) TryCreatePod(job *batchv1.Job) error {
	w.T.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, GenerateName: job.Name + "-",
		Labels: map[string]string{"job-name": job.Name}}, Spec: job.Spec.Template.Spec}
	err := K8s.Create(Ctx, pod)
	if err == nil {
		w.T.Fatal("the API server accepted the mover pod; the story needs it refused")
	}
	now := metav1.Now()
	w.Must(K8s.Create(Ctx, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, GenerateName: job.Name + "."},
		InvolvedObject: corev1.ObjectReference{Kind: "Job", APIVersion: "batch/v1", Namespace: job.Namespace,
			Name: job.Name, UID: job.UID, ResourceVersion: job.ResourceVersion},
		Reason: "FailedCreate", Message: "Error creating: " + err.Error(), Type: corev1.EventTypeWarning,
		Source: corev1.EventSource{Component: "job-controller"}, FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}))
	return err
}

// StartPod plays the kubelet and the Job controller once the pod can be created: it runs.
func (w *World) StartPod(job *batchv1.Job) {
	w.T.Helper()
	labels := map[string]string{"job-name": job.Name}
	for k, v := range job.Spec.Template.Labels {
		labels[k] = v
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-r7x2k", Labels: labels},
		Spec: job.Spec.Template.Spec}
	// The API server's quota admission sees a deleted quota through its own cache: it may refuse
	// the pod for a moment after AllowPods.
	deadline := time.Now().Add(10 * time.Second)
	for err := K8s.Create(Ctx, pod); err != nil; err = K8s.Create(Ctx, pod) {
		if !apierrors.IsForbidden(err) || time.Now().After(deadline) {
			w.T.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: storagekit.MoverContainer, Image: pod.Spec.Containers[0].Image, Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	w.Must(K8s.Status().Update(Ctx, pod))
	now := metav1.Now()
	job.Status.StartTime, job.Status.Active, job.Status.Ready = &now, 1, ptr.To[int32](1)
	w.Must(K8s.Status().Update(Ctx, job))
}

// ClaimMounts is what a mover Job mounts where: mount path -> claim, with " (read-only)" after
// the claim of a read-only mount.
func ClaimMounts(job *batchv1.Job) map[string]string {
	spec := job.Spec.Template.Spec
	claims := map[string]string{}
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
	}
	mounts := map[string]string{}
	for _, m := range spec.Containers[0].VolumeMounts {
		if c, ok := claims[m.Name]; ok {
			if m.ReadOnly {
				c += " (read-only)"
			}
			mounts[m.MountPath] = c
		}
	}
	return mounts
}
