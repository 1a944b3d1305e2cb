package pvcbackup

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/errclass"
)

// computeStatus and computeRestoreStatus are pure: status in, conditions out.
func TestComputeStatus(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	failed := &storagev1.RunStatus{ID: "20261204T090000Z", Result: storagev1.RunFailed, Reason: storagekit.ReasonDeadlineExceeded, Message: "the run did not finish within its deadline of 6h0m0s"}
	ok := &storagev1.RunStatus{ID: "20261204T090000Z", Result: storagev1.RunSucceeded, Bytes: 10, SHA256: "ab"}
	active := &storagev1.ActiveRun{ID: "20261204T100000Z", StartTime: metav1.NewTime(now)}
	wrongPassword := &storagev1.RunStatus{ID: "20261204T090000Z", Result: storagev1.RunFailed, Reason: ReasonRepositoryPasswordWrong,
		Message: `mover: neither the repository password nor the previous one opens the kopia repository at ns/app/kopia; put it under "KOPIA_PASSWORD"`}
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
		{"wrong repository password pair", wrongPassword, nil, "", "", nil, "False", ReasonRepositoryPasswordWrong, "False", ReasonFailed,
			[]string{"neither the repository password nor the previous one", `"KOPIA_PASSWORD"`}, []string{"RepositoryPasswordWrong"}},
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
			ready, running := storagetest.Condition(pb, storagev1.ConditionReady), storagetest.Condition(pb, storagev1.ConditionRunning)
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
