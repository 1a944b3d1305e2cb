package pvcbackup

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/schedule"
)

// A PVCBackup's gauges are scraped with its status: the schedule gauges once it was reconciled,
// the repository size once a kopia run reported it, the last success once a run succeeded; and
// all of them are gone once it is deleted.
func TestBackupGaugesFollowTheStatus(t *testing.T) {
	g := newBackupGauges()
	sched, err := schedule.Parse("0 2 * * *", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	pb := &storagev1.PVCBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"}}
	pb.Status.MissedSchedules, pb.Status.SkippedSchedules = 2, 1
	s := &scope{schedule: sched, next: sched.Next(now)}
	g.observe(pb, s)
	suspended := &storagev1.PVCBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "off"}}
	suspended.Spec.Suspend = true
	g.observe(suspended, s)
	expect := func(text string) {
		t.Helper()
		if err := testutil.CollectAndCompare(g, strings.NewReader(text)); err != nil {
			t.Fatal(err)
		}
	}
	const schedGauges = `
# HELP okgoes_backup_missed_schedules Scheduled backups that never ran (status.missedSchedules).
# TYPE okgoes_backup_missed_schedules gauge
okgoes_backup_missed_schedules{name="app",namespace="ns"} 2
okgoes_backup_missed_schedules{name="off",namespace="ns"} 0
# HELP okgoes_backup_skipped_schedules Scheduled backups skipped because a run was still going (status.skippedSchedules).
# TYPE okgoes_backup_skipped_schedules gauge
okgoes_backup_skipped_schedules{name="app",namespace="ns"} 1
okgoes_backup_skipped_schedules{name="off",namespace="ns"} 0
# HELP okgoes_backup_schedule_interval_seconds Time between the next two scheduled backups (0 when suspended).
# TYPE okgoes_backup_schedule_interval_seconds gauge
okgoes_backup_schedule_interval_seconds{name="app",namespace="ns"} 86400
okgoes_backup_schedule_interval_seconds{name="off",namespace="ns"} 0
`
	expect(schedGauges)

	pb.Status.Repository = &storagev1.RepositoryStatus{Bytes: 4096}
	g.observe(pb, s)
	g.observeSuccess(pb, &storagev1.RunStatus{Bytes: 1234, CompletionTime: metav1.NewTime(now)})
	expect(schedGauges + `
# HELP okgoes_backup_repository_bytes Size of the kopia repository in the bucket, as the last kopia run found it (status.repository.bytes).
# TYPE okgoes_backup_repository_bytes gauge
okgoes_backup_repository_bytes{name="app",namespace="ns"} 4096
# HELP okgoes_backup_bytes Bytes the last successful backup stored: its archive, or the chunks a kopia backup uploaded.
# TYPE okgoes_backup_bytes gauge
okgoes_backup_bytes{name="app",namespace="ns"} 1234
# HELP okgoes_backup_last_success_timestamp_seconds Unix time of the last successful backup.
# TYPE okgoes_backup_last_success_timestamp_seconds gauge
okgoes_backup_last_success_timestamp_seconds{name="app",namespace="ns"} 1.796472e+09
`)

	g.forget(types.NamespacedName{Namespace: "ns", Name: "app"})
	g.forget(types.NamespacedName{Namespace: "ns", Name: "off"})
	if n := testutil.CollectAndCount(g); n != 0 {
		t.Fatalf("%d series left after the PVCBackups were deleted", n)
	}
}

// The gauges of 10,000 PVCBackups take a few hundred bytes each, not the ~2 KB of three
// GaugeVec series (issue 13: the manager's memory with 10,000 PVCBackups).
func TestBackupGaugesAreSmall(t *testing.T) {
	const n = 10000
	backups := make([]*storagev1.PVCBackup, n)
	for i := range backups {
		backups[i] = &storagev1.PVCBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "backups", Name: fmt.Sprintf("app-%05d", i)}}
		// The three conditions a kopia PVCBackup has (okgoes_backup_condition keeps their type,
		// status and reason, which are the status's own strings).
		backups[i].Status.Conditions = []metav1.Condition{
			{Type: storagev1.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonScheduled},
			{Type: storagev1.ConditionRunning, Status: metav1.ConditionFalse, Reason: ReasonSucceeded},
			{Type: storagev1.ConditionRepositoryHealthy, Status: metav1.ConditionTrue, Reason: ReasonRepositoryChecked},
		}
	}
	s := &scope{}
	g := newBackupGauges()
	before := heapAlloc()
	for _, pb := range backups {
		g.observe(pb, s)
	}
	per := float64(heapAlloc()-before) / n
	runtime.KeepAlive(g)
	runtime.KeepAlive(backups)
	t.Logf("%.0f bytes per PVCBackup", per)
	if per > 400 {
		t.Fatalf("the gauges take %.0f bytes per PVCBackup, want at most 400", per)
	}
}

// heapAlloc is the live heap: after two collections, so that objects whose finalizers ran in the
// first are gone too.
func heapAlloc() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// The conditions of a PVCBackup are scraped as okgoes_backup_condition, one series per type with
// its status and reason, the series the backup alerts read (config/prometheus/alerts.yaml):
// a damaged repository and a stalled run show as such, and a condition that changed shows only
// its new reason.
func TestBackupConditionsAreScraped(t *testing.T) {
	g := newBackupGauges()
	pb := &storagev1.PVCBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"}}
	pb.Status.Conditions = []metav1.Condition{
		{Type: storagev1.ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonBackupFailed},
		{Type: storagev1.ConditionRunning, Status: metav1.ConditionTrue, Reason: ReasonStalled},
		{Type: storagev1.ConditionRepositoryHealthy, Status: metav1.ConditionFalse, Reason: ReasonRepositoryDamaged},
	}
	g.observe(pb, &scope{})
	const help = `
# HELP okgoes_backup_condition 1 for each status condition of a PVCBackup, with its type, status (True, False, Unknown) and reason.
# TYPE okgoes_backup_condition gauge
`
	expect := func(text string) {
		t.Helper()
		if err := testutil.CollectAndCompare(g, strings.NewReader(help+text), "okgoes_backup_condition"); err != nil {
			t.Fatal(err)
		}
	}
	expect(`okgoes_backup_condition{name="app",namespace="ns",reason="BackupFailed",status="False",type="Ready"} 1
okgoes_backup_condition{name="app",namespace="ns",reason="Stalled",status="True",type="Running"} 1
okgoes_backup_condition{name="app",namespace="ns",reason="RepositoryDamaged",status="False",type="RepositoryHealthy"} 1
`)
	pb.Status.Conditions[1] = metav1.Condition{Type: storagev1.ConditionRunning, Status: metav1.ConditionFalse, Reason: ReasonSucceeded}
	g.observe(pb, &scope{})
	expect(`okgoes_backup_condition{name="app",namespace="ns",reason="BackupFailed",status="False",type="Ready"} 1
okgoes_backup_condition{name="app",namespace="ns",reason="Succeeded",status="False",type="Running"} 1
okgoes_backup_condition{name="app",namespace="ns",reason="RepositoryDamaged",status="False",type="RepositoryHealthy"} 1
`)
}
