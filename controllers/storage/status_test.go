package storage

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/errclass"
)

// computeStatus and computeRestoreStatus are pure: status in, conditions out.
func TestComputeStatus(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	failed := &storagev1.RunStatus{ID: "20261204T090000Z", Result: storagev1.RunFailed, Reason: storagekit.ReasonDeadlineExceeded, Message: "the run did not finish within its deadline of 6h0m0s"}
	ok := &storagev1.RunStatus{ID: "20261204T090000Z", Result: storagev1.RunSucceeded, Bytes: 10, SHA256: "ab"}
	active := &storagev1.ActiveRun{ID: "20261204T100000Z", StartTime: metav1.NewTime(now)}
	tests := []struct {
		name                    string
		last                    *storagev1.RunStatus
		active                  *storagev1.ActiveRun
		stage, stageMessage     string
		err                     error
		ready, readyReason      string
		running, runningReason  string
		readyWords, runingWords []string
	}{
		{"first run pending", nil, nil, "", "", nil, "True", ReasonScheduled, "False", ReasonWaitingForSchedule, nil, nil},
		{"last run succeeded", ok, nil, "", "", nil, "True", ReasonScheduled, "False", ReasonSucceeded, nil, []string{"10 bytes"}},
		{"last run over its deadline", failed, nil, "", "", nil, "False", ReasonBackupFailed, "False", ReasonFailed,
			[]string{"DeadlineExceeded", "deadline of 6h0m0s"}, []string{"DeadlineExceeded"}},
		{"a pod that cannot start", ok, active, storagekit.ReasonWaitingForPod, "backup waits for its mover pod: ImagePullBackOff", nil,
			"True", ReasonScheduled, "True", storagekit.ReasonWaitingForPod, nil, []string{"ImagePullBackOff"}},
		{"uploading", nil, active, ReasonUploading, "", nil, "True", ReasonScheduled, "True", ReasonUploading, nil, []string{active.ID}},
		{"missing PVC", nil, nil, "", "", errclass.Waiting(ReasonPVCNotFound, `PersistentVolumeClaim "data" does not exist`, time.Second),
			"False", ReasonPVCNotFound, "False", ReasonWaitingForSchedule, []string{`"data"`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pb := &storagev1.PVCBackup{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
			pb.Status.LastRun, pb.Status.ActiveRun = tt.last, tt.active
			computeStatus(pb, &scope{backup: pb, now: now, next: now.Add(time.Hour), stage: tt.stage, stageMessage: tt.stageMessage}, tt.err)
			ready, running := condition(pb, storagev1.ConditionReady), condition(pb, storagev1.ConditionRunning)
			if string(ready.Status) != tt.ready || ready.Reason != tt.readyReason || string(running.Status) != tt.running || running.Reason != tt.runningReason {
				t.Fatalf("Ready %s/%s, Running %s/%s; want %s/%s, %s/%s", ready.Status, ready.Reason, running.Status, running.Reason,
					tt.ready, tt.readyReason, tt.running, tt.runningReason)
			}
			for _, w := range tt.readyWords {
				if !strings.Contains(ready.Message, w) {
					t.Errorf("Ready message %q lacks %q", ready.Message, w)
				}
			}
			for _, w := range tt.runingWords {
				if !strings.Contains(running.Message, w) {
					t.Errorf("Running message %q lacks %q", running.Message, w)
				}
			}
			if pb.Status.ObservedGeneration != 3 || ready.ObservedGeneration != 3 {
				t.Errorf("observedGeneration %d / %d", pb.Status.ObservedGeneration, ready.ObservedGeneration)
			}
		})
	}
}

func TestComputeRestoreStatus(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		s      restoreScope
		err    error
		phase  storagev1.RestorePhase
		status metav1.ConditionStatus
		reason string
	}{
		{"restoring", restoreScope{}, nil, storagev1.RestoreRestoring, metav1.ConditionFalse, ReasonRestoring},
		{"waiting for the pod", restoreScope{waiting: storagekit.ReasonWaitingForPod, waitingMessage: "Unschedulable"}, nil,
			storagev1.RestoreRestoring, metav1.ConditionFalse, storagekit.ReasonWaitingForPod},
		{"restored", restoreScope{result: &restoreResult{storagev1.RestoreSucceeded, ReasonRestored, "ok"}}, nil,
			storagev1.RestoreSucceeded, metav1.ConditionTrue, ReasonRestored},
		{"over the deadline", restoreScope{result: &restoreResult{storagev1.RestoreFailed, storagekit.ReasonDeadlineExceeded, "deadline"}}, nil,
			storagev1.RestoreFailed, metav1.ConditionTrue, storagekit.ReasonDeadlineExceeded},
		{"target in use", restoreScope{}, errclass.Waiting(ReasonTargetInUse, "pod x", time.Second),
			storagev1.RestorePending, metav1.ConditionFalse, ReasonTargetInUse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pr := &storagev1.PVCRestore{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
			s := tt.s
			s.restore, s.now = pr, now
			computeRestoreStatus(pr, &s, tt.err)
			c := condition2(pr)
			if pr.Status.Phase != tt.phase || c.Status != tt.status || c.Reason != tt.reason {
				t.Fatalf("phase %s, Complete %s/%s; want %s, %s/%s", pr.Status.Phase, c.Status, c.Reason, tt.phase, tt.status, tt.reason)
			}
		})
	}
}
