package storage

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
)

var (
	runsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "okgoes_backup_runs_total", Help: "Finished backup runs by result (Succeeded, Failed).",
	}, []string{"namespace", "name", "result"})
	runDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "okgoes_backup_duration_seconds", Help: "Duration of finished backup runs.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 16), // 1s .. ~9h
	}, []string{"namespace", "name"})
	lastBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "okgoes_backup_bytes", Help: "Bytes the last successful backup stored: its archive, or the chunks a kopia backup uploaded.",
	}, []string{"namespace", "name"})
	lastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "okgoes_backup_last_success_timestamp_seconds", Help: "Unix time of the last successful backup.",
	}, []string{"namespace", "name"})
	interval = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "okgoes_backup_schedule_interval_seconds", Help: "Time between the next two scheduled backups (0 when suspended).",
	}, []string{"namespace", "name"})
	missed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "okgoes_backup_missed_schedules", Help: "Scheduled backups that never ran (status.missedSchedules).",
	}, []string{"namespace", "name"})
	repositoryBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "okgoes_backup_repository_bytes", Help: "Size of the kopia repository in the bucket, as the last kopia run found it (status.repository.bytes).",
	}, []string{"namespace", "name"})
	skipped = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "okgoes_backup_skipped_schedules", Help: "Scheduled backups skipped because a run was still going (status.skippedSchedules).",
	}, []string{"namespace", "name"})
)

func init() {
	metrics.Registry.MustRegister(runsTotal, runDuration, lastBytes, lastSuccess, interval, missed, skipped, repositoryBytes)
}

// observeMetrics sets the gauges that follow the status of a PVCBackup.
func observeMetrics(pb *storagev1.PVCBackup, s *scope) {
	ns, name := pb.Namespace, pb.Name
	missed.WithLabelValues(ns, name).Set(float64(pb.Status.MissedSchedules))
	skipped.WithLabelValues(ns, name).Set(float64(pb.Status.SkippedSchedules))
	gap := 0.0
	if sched := s.schedule; sched != nil && !pb.Spec.Suspend && !s.next.IsZero() {
		gap = sched.Next(s.next).Sub(s.next).Seconds()
	}
	interval.WithLabelValues(ns, name).Set(gap)
	if rs := pb.Status.Repository; rs != nil {
		repositoryBytes.WithLabelValues(ns, name).Set(float64(rs.Bytes))
	}
}

// observeFinishedRun counts a run that ended in this reconcile. It is called only once the status
// recording the end was written: a failed write means the next reconcile finishes the run again,
// and counting it then keeps every run counted exactly once.
func observeFinishedRun(pb *storagev1.PVCBackup, s *scope) {
	run := s.finished
	if run == nil {
		return
	}
	ns, name := pb.Namespace, pb.Name
	runsTotal.WithLabelValues(ns, name, string(run.Result)).Inc()
	runDuration.WithLabelValues(ns, name).Observe(run.CompletionTime.Sub(run.StartTime.Time).Seconds())
	if run.Result == storagev1.RunSucceeded {
		lastBytes.WithLabelValues(ns, name).Set(float64(run.Bytes))
		lastSuccess.WithLabelValues(ns, name).Set(float64(run.CompletionTime.Unix()))
	}
}

// forgetMetrics drops the series of a deleted PVCBackup.
func forgetMetrics(ns, name string) {
	for _, v := range []*prometheus.GaugeVec{lastBytes, lastSuccess, interval, missed, skipped, repositoryBytes} {
		v.DeleteLabelValues(ns, name)
	}
	runDuration.DeleteLabelValues(ns, name)
	for _, result := range []storagev1.RunResult{storagev1.RunSucceeded, storagev1.RunFailed} {
		runsTotal.DeleteLabelValues(ns, name, string(result))
	}
}
