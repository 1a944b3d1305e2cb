package backupcatalog

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// A source with more backups than status may hold lists the newest MaxCatalogBackups and counts
// the rest; the same for broken ones.
func TestSourceStatusIsBounded(t *testing.T) {
	var cat storagekit.Catalog
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 60 { // newest first, as ReadCatalog sorts them
		at := base.Add(time.Duration(60-i) * time.Hour)
		m := archive.Manifest{ID: at.Format("20060102T150405Z") + "-manual", Files: 1 << 40, ContentBytes: 1 << 50, Dirs: 1 << 40, Symlinks: 1 << 40,
			CompletionTime: at, Engine: "kopia", Kopia: &archive.KopiaSnapshot{SnapshotID: strings.Repeat("k", 33)}}
		cat.Valid = append(cat.Valid, storagekit.BackupEntry{ID: m.ID, Time: at, Manifest: m})
	}
	for i := range 15 {
		cat.Broken = append(cat.Broken, storagekit.BrokenEntry{ID: fmt.Sprintf("%0256d", i), Problem: strings.Repeat("broken ", 1000)})
	}
	cat.Record = &mover.RepositoryRecord{RunID: "r", Damage: strings.Repeat("damage ", 1000)}
	s := sourceStatus("ns", "app", "ns/app/", cat)
	if len(s.Backups) != storagev1.MaxCatalogBackups || s.MoreBackups != 10 || s.Backups[0].ID != cat.Valid[0].ID {
		t.Errorf("backups: %d listed, %d more, first %s; want 50, 10, the newest %s", len(s.Backups), s.MoreBackups, s.Backups[0].ID, cat.Valid[0].ID)
	}
	if len(s.BrokenBackups) != storagev1.MaxCatalogBroken || s.MoreBrokenBackups != 5 {
		t.Errorf("broken: %d listed, %d more; want 10, 5", len(s.BrokenBackups), s.MoreBrokenBackups)
	}
	if s.Engine != storagev1.EngineKopia || s.Backups[0].StoredBytes != nil || s.Backups[0].Confirmed == nil || !*s.Backups[0].Confirmed {
		t.Errorf("kopia source: %+v", s.Backups[0])
	}
	// The largest status: MaxCatalogSources such sources, each at its bounds.
	size := storagev1.MaxCatalogSources * len(storagetest.MustJSON(t, s))
	if size > 1<<20 {
		t.Errorf("a status of %d sources at their bounds is %d bytes: over 1 MiB, too close to the API server's limit", storagev1.MaxCatalogSources, size)
	}
	t.Logf("a status of %d sources at their bounds: %d bytes", storagev1.MaxCatalogSources, size)
}

func TestUntilRefresh(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ready := []metav1.Condition{{Type: storagev1.ConditionReady, Status: metav1.ConditionTrue}}
	notReady := []metav1.Condition{{Type: storagev1.ConditionReady, Status: metav1.ConditionFalse}}
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-d)} }
	for _, tc := range []struct {
		name     string
		gen, obs int64
		last     *metav1.Time
		conds    []metav1.Condition
		interval *metav1.Duration
		want     time.Duration
	}{
		{"never read", 1, 0, nil, nil, nil, 0},
		{"fresh", 1, 1, at(4 * time.Minute), ready, nil, 6 * time.Minute},
		{"interval passed", 1, 1, at(11 * time.Minute), ready, nil, 0},
		{"spec changed", 2, 1, at(time.Minute), ready, nil, 0},
		{"last attempt failed", 1, 1, at(time.Minute), notReady, nil, 0},
		{"own interval", 1, 1, at(time.Minute), ready, &metav1.Duration{Duration: time.Hour}, 59 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bc := &storagev1.BackupCatalog{ObjectMeta: metav1.ObjectMeta{Generation: tc.gen},
				Spec:   storagev1.BackupCatalogSpec{RefreshInterval: tc.interval},
				Status: storagev1.BackupCatalogStatus{ObservedGeneration: tc.obs, LastRefreshTime: tc.last, Conditions: tc.conds}}
			if got := untilRefresh(bc, now); got != tc.want {
				t.Errorf("untilRefresh = %v, want %v", got, tc.want)
			}
		})
	}
}

// A failed refresh keeps what the last complete read found while the spec is the same, and drops
// it after a spec change (it would describe another location); a transient error changes nothing.
func TestComputeStatusKeepsOnlyWhatDescribesTheSpec(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	old := []storagev1.CatalogSource{{Namespace: "ns", PVCBackup: "app"}}
	waiting := errclass.Waiting(storagekit.ReasonEndpointUnreachable, "S3 endpoint unreachable", time.Second)
	for _, tc := range []struct {
		name      string
		gen       int64
		err       error
		wantKept  bool
		wantReady metav1.ConditionStatus
	}{
		{"same spec, S3 down", 1, waiting, true, metav1.ConditionFalse},
		{"new spec, S3 down", 2, waiting, false, metav1.ConditionFalse},
		{"transient", 2, fmt.Errorf("API server hiccup"), true, metav1.ConditionTrue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bc := &storagev1.BackupCatalog{ObjectMeta: metav1.ObjectMeta{Generation: tc.gen},
				Status: storagev1.BackupCatalogStatus{ObservedGeneration: 1, Sources: old, Backups: 3, LastRefreshTime: &metav1.Time{Time: now.Add(-time.Hour)},
					Conditions: []metav1.Condition{{Type: storagev1.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonRefreshed}}}}
			computeStatus(bc, nil, tc.err, now)
			if kept := len(bc.Status.Sources) == 1 && bc.Status.LastRefreshTime != nil; kept != tc.wantKept {
				t.Errorf("sources kept %v, want %v: %+v", kept, tc.wantKept, bc.Status)
			}
			if c := bc.Status.Conditions[0]; c.Status != tc.wantReady {
				t.Errorf("Ready %s, want %s", c.Status, tc.wantReady)
			}
		})
	}
}
