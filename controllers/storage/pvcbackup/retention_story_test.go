package pvcbackup

import (
	"strings"
	"testing"
	"time"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

func TestTenRunsWithKeepLastThreeLeaveThree(t *testing.T) {
	w := newWorld(t)
	pb := w.Backup("rotating", "@hourly")
	pb.Spec.Retention = &storagev1.Retention{KeepLast: 3}
	first := w.CreateHourly(pb)
	src := storagetest.Volume(t)
	for i := range 10 {
		w.ScheduledRun(pb, first, i, src)
	}
	keys := w.Keys(storagekit.BackupPrefix(pb))
	if len(keys) != 6 {
		t.Fatalf("%d objects after 10 runs with keepLast 3, want 3 archives + 3 manifests: %v", len(keys), keys)
	}
	if len(pb.Status.Backups) != 3 {
		t.Fatalf("status.backups: %+v", pb.Status.Backups)
	}
	for i, b := range pb.Status.Backups { // the newest three, newest first
		want := first.Add(time.Duration(9-i) * time.Hour).UTC().Format("20060102T150405Z")
		if b.ID != want || !strings.Contains(strings.Join(keys, " "), b.ID+".manifest.json") {
			t.Errorf("backups[%d] = %s, want %s (in %v)", i, b.ID, want, keys)
		}
	}
	if len(pb.Status.History) != 10 || pb.Status.MissedSchedules != 0 {
		t.Errorf("history %d, missed %d", len(pb.Status.History), pb.Status.MissedSchedules)
	}
}
