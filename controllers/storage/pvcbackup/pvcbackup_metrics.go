package pvcbackup

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
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
	// gauges holds the gauges of every PVCBackup.
	gauges = newBackupGauges()
)

func init() {
	metrics.Registry.MustRegister(runsTotal, runDuration, gauges)
}

// Descriptions of the gauges of a PVCBackup, each labelled with its namespace and name.
var (
	lastBytesDesc = prometheus.NewDesc("okgoes_backup_bytes",
		"Bytes the last successful backup stored: its archive, or the chunks a kopia backup uploaded.", backupLabels, nil)
	lastSuccessDesc = prometheus.NewDesc("okgoes_backup_last_success_timestamp_seconds",
		"Unix time of the last successful backup.", backupLabels, nil)
	intervalDesc = prometheus.NewDesc("okgoes_backup_schedule_interval_seconds",
		"Time between the next two scheduled backups (0 when suspended).", backupLabels, nil)
	missedDesc = prometheus.NewDesc("okgoes_backup_missed_schedules",
		"Scheduled backups that never ran (status.missedSchedules).", backupLabels, nil)
	repositoryBytesDesc = prometheus.NewDesc("okgoes_backup_repository_bytes",
		"Size of the kopia repository in the bucket, as the last kopia run found it (status.repository.bytes).", backupLabels, nil)
	skippedDesc = prometheus.NewDesc("okgoes_backup_skipped_schedules",
		"Scheduled backups skipped because a run was still going (status.skippedSchedules).", backupLabels, nil)
	// conditionDesc is the status conditions of a PVCBackup, one series per condition type, as
	// kube-state-metrics exports the conditions of built-in objects: the alerts read their
	// reasons (Ready BackupFailed, Running Stalled, RepositoryHealthy RepositoryDamaged, ...).
	conditionDesc = prometheus.NewDesc("okgoes_backup_condition",
		"1 for each status condition of a PVCBackup, with its type, status (True, False, Unknown) and reason.",
		append(backupLabels[:2:2], "type", "status", "reason"), nil)
	backupLabels = []string{"namespace", "name"}
)

// backupGauges is the Prometheus collector of the gauges of every PVCBackup. It keeps their
// values as plain numbers and makes the metrics when scraped: a GaugeVec keeps each series as
// a metric object with its label pairs (about 700 bytes), 20 MiB for the three gauges every one
// of 10,000 PVCBackups has (docs/benchmarks.md, Scale).
type backupGauges struct {
	mu       sync.Mutex
	byBackup map[types.NamespacedName]*gaugeValues
}

// gaugeValues are the gauges of one PVCBackup. The schedule gauges exist once it was reconciled,
// the repository size once a kopia run reported it, the last success's once a run succeeded.
type gaugeValues struct {
	missed, skipped, interval float64
	repositoryBytes           float64
	hasRepository             bool
	lastBytes, lastSuccess    float64
	hasSuccess                bool
	conditions                []conditionValue
}

// conditionValue is one status condition of a PVCBackup, as okgoes_backup_condition shows it.
type conditionValue struct{ kind, status, reason string }

func newBackupGauges() *backupGauges {
	return &backupGauges{byBackup: map[types.NamespacedName]*gaugeValues{}}
}

// update changes the gauges of key, created empty when it has none.
func (g *backupGauges) update(key types.NamespacedName, change func(*gaugeValues)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v := g.byBackup[key]
	if v == nil {
		v = &gaugeValues{}
		g.byBackup[key] = v
	}
	change(v)
}

// forget drops the gauges of key.
func (g *backupGauges) forget(key types.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.byBackup, key)
}

// Describe implements prometheus.Collector.
func (g *backupGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{lastBytesDesc, lastSuccessDesc, intervalDesc, missedDesc, repositoryBytesDesc, skippedDesc, conditionDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector, from a copy of the values (a slow scrape does not hold
// up reconciles).
func (g *backupGauges) Collect(ch chan<- prometheus.Metric) {
	type entry struct {
		key types.NamespacedName
		v   gaugeValues
	}
	g.mu.Lock()
	all := make([]entry, 0, len(g.byBackup))
	for k, v := range g.byBackup {
		all = append(all, entry{k, *v})
	}
	g.mu.Unlock()
	for _, e := range all {
		ns, name, v := e.key.Namespace, e.key.Name, e.v
		gauge := func(d *prometheus.Desc, value float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, value, ns, name)
		}
		gauge(missedDesc, v.missed)
		gauge(skippedDesc, v.skipped)
		gauge(intervalDesc, v.interval)
		if v.hasRepository {
			gauge(repositoryBytesDesc, v.repositoryBytes)
		}
		if v.hasSuccess {
			gauge(lastBytesDesc, v.lastBytes)
			gauge(lastSuccessDesc, v.lastSuccess)
		}
		for _, c := range v.conditions {
			ch <- prometheus.MustNewConstMetric(conditionDesc, prometheus.GaugeValue, 1, ns, name, c.kind, c.status, c.reason)
		}
	}
}

// observeMetrics sets the gauges that follow the status of a PVCBackup.
func observeMetrics(pb *storagev1.PVCBackup, s *scope) { gauges.observe(pb, s) }

// observe sets the gauges that follow the status of pb.
func (g *backupGauges) observe(pb *storagev1.PVCBackup, s *scope) {
	gap := 0.0
	if sched := s.schedule; sched != nil && !pb.Spec.Suspend && !s.next.IsZero() {
		gap = sched.Next(s.next).Sub(s.next).Seconds()
	}
	g.update(types.NamespacedName{Namespace: pb.Namespace, Name: pb.Name}, func(v *gaugeValues) {
		v.missed, v.skipped, v.interval = float64(pb.Status.MissedSchedules), float64(pb.Status.SkippedSchedules), gap
		if rs := pb.Status.Repository; rs != nil {
			v.repositoryBytes, v.hasRepository = float64(rs.Bytes), true
		}
		// A new slice: Collect reads the old one after it let go of the lock.
		v.conditions = make([]conditionValue, 0, len(pb.Status.Conditions))
		for _, c := range pb.Status.Conditions {
			v.conditions = append(v.conditions, conditionValue{c.Type, string(c.Status), c.Reason})
		}
	})
}

// observeSuccess sets the gauges of the last successful run of pb.
func (g *backupGauges) observeSuccess(pb *storagev1.PVCBackup, run *storagev1.RunStatus) {
	g.update(types.NamespacedName{Namespace: pb.Namespace, Name: pb.Name}, func(v *gaugeValues) {
		v.lastBytes, v.lastSuccess, v.hasSuccess = float64(run.Bytes), float64(run.CompletionTime.Unix()), true
	})
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
		gauges.observeSuccess(pb, run)
	}
}

// forgetMetrics drops the series of a deleted PVCBackup.
func forgetMetrics(ns, name string) {
	gauges.forget(types.NamespacedName{Namespace: ns, Name: name})
	runDuration.DeleteLabelValues(ns, name)
	for _, result := range []storagev1.RunResult{storagev1.RunSucceeded, storagev1.RunFailed} {
		runsTotal.DeleteLabelValues(ns, name, string(result))
	}
}
