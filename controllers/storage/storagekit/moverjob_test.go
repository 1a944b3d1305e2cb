package storagekit

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// podListCounter is an APIReader that counts pod lists and finds no pod.
type podListCounter struct {
	client.Reader
	lists int
}

func (c *podListCounter) List(_ context.Context, _ client.ObjectList, _ ...client.ListOption) error {
	c.lists++
	return nil
}

// The poll of a running backup lists no pods: a ready mover pod has nothing to report yet, and a
// Job for which the Job controller counts no pod at all has none to read (the reconcile right
// after a run starts: issue 13). A Job with a pod that is not ready (why does it wait?), a failed
// pod, or an ended Job (the mover's report) still has its pods read.
func TestARunningMoverIsFollowedWithoutListingPods(t *testing.T) {
	start := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	done := batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}
	for _, tt := range []struct {
		name      string
		status    batchv1.JobStatus
		now       time.Time
		wantLists int
	}{
		{"mover pod ready", batchv1.JobStatus{Ready: ptr.To[int32](1), Active: 1}, start.Add(time.Minute), 0},
		{"no pod yet", batchv1.JobStatus{}, start.Add(time.Second), 0},
		{"no pod yet, past its deadline", batchv1.JobStatus{}, start.Add(time.Hour), 1},
		{"a pod failed, the Job goes on", batchv1.JobStatus{Ready: ptr.To[int32](0), Failed: 1}, start.Add(time.Minute), 1},
		{"no pod ready yet", batchv1.JobStatus{Ready: ptr.To[int32](0), Active: 1}, start.Add(time.Minute), 1},
		{"complete", batchv1.JobStatus{Ready: ptr.To[int32](1), Conditions: []batchv1.JobCondition{done}}, start.Add(time.Minute), 1},
		{"past its deadline", batchv1.JobStatus{Ready: ptr.To[int32](1), Active: 1}, start.Add(time.Hour), 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reader := &podListCounter{}
			job := &batchv1.Job{Status: tt.status}
			st := Deps{APIReader: reader}.ReadMoverJob(context.Background(), job, start, tt.now, 600)
			if reader.lists != tt.wantLists {
				t.Errorf("%d pod lists, want %d", reader.lists, tt.wantLists)
			}
			if tt.name == "mover pod ready" && (st.Finished || st.Waiting != "") {
				t.Errorf("a running mover reads as %+v", st)
			}
		})
	}
}
