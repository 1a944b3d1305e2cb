package pvcrestore

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/errclass"
)

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
