// Command dashboard writes the Grafana dashboard of okgoes-operator as JSON (make dashboard:
// config/grafana/okgoes-operator.json, shipped in a ConfigMap labelled for the Grafana sidecar).
// hack/verify-generated.sh fails when the committed JSON is not what this program writes, and
// TestDashboardReadsOnlyExportedMetrics (alerts_test.go) when a query names a metric the manager
// does not register.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

func main() {
	out := flag.String("out", "", "file to write the dashboard JSON to (default: stdout)")
	flag.Parse()
	data, err := render()
	if err == nil {
		if *out == "" {
			_, err = os.Stdout.Write(data)
		} else {
			err = os.WriteFile(*out, data, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}

// render is the dashboard as indented JSON with a final newline.
func render() ([]byte, error) {
	d, err := okgoesDashboard().Build()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // PromQL's > and < stay readable
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// job selects the manager's series, as the alerts do (config/prometheus/alerts.yaml).
const job = `job=~".*okgoes-operator.*"`

// ns is the selector of the objects' namespace variable.
const ns = job + `, namespace=~"$namespace"`

var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

func okgoesDashboard() *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder("okgoes-operator").
		Uid("okgoes-operator").
		Description("The okgoes-operator manager, its backups and restores, and its Redis caches; alerts and runbooks: docs/alerts.md.").
		Tags([]string{"okgoes-operator", "redis", "backup"}).
		Refresh("1m").
		Time("now-6h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(dashboard.NewQueryVariableBuilder("namespace").
			Label("Namespace").
			Datasource(datasource).
			// Every namespace with an object of the operator (a cache, a backup, a restore).
			Query(dashboard.StringOrMap{String: cog.ToPtr(`label_values({__name__=~"okgoes_.*", ` + job + `}, namespace)`)}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Multi(true).IncludeAll(true).AllValue(".*")).
		WithRow(row("Operator")).
		WithPanel(statPanel("Managers up", `sum(up{`+job+`})`, 12).
			Description("Scraped managers answering (OkgoesOperatorDown when none).")).
		WithPanel(statPanel("Leading", `max(leader_election_master_status{`+job+`, name="okgoes-operator.okgoes.com"})`, 12).
			Description("1 when a manager holds the Lease (OkgoesOperatorNoLeader when none).")).
		WithPanel(timeseriesPanel("Reconciles per second", "reqps",
			query(`sum by (controller, result) (rate(controller_runtime_reconcile_total{`+job+`}[$__rate_interval]))`, "{{controller}} {{result}}"))).
		WithPanel(timeseriesPanel("Reconcile latency (P99)", "s",
			query(`histogram_quantile(0.99, sum by (controller, le) (rate(controller_runtime_reconcile_time_seconds_bucket{`+job+`}[$__rate_interval])))`, "{{controller}}"))).
		WithPanel(timeseriesPanel("Work queue depth", "none",
			query(`sum by (name) (workqueue_depth{`+job+`})`, "{{name}}"))).
		WithRow(row("Backups and restores")).
		WithPanel(statPanel("PVCBackups not Ready", `count(okgoes_backup_condition{`+ns+`, type="Ready", status="False"} == 1) or vector(0)`, 6)).
		WithPanel(statPanel("Damaged repositories", `count(okgoes_backup_condition{`+ns+`, type="RepositoryHealthy", reason="RepositoryDamaged"} == 1) or vector(0)`, 6)).
		WithPanel(statPanel("Stalled runs", `count(okgoes_backup_condition{`+ns+`, type="Running", reason="Stalled"} == 1) or vector(0)`, 6)).
		WithPanel(statPanel("Failed PVCRestores", `count(okgoes_restore_failed{`+ns+`}) or vector(0)`, 6)).
		WithPanel(timeseriesPanel("Age of the last successful backup", "s",
			query(`time() - okgoes_backup_last_success_timestamp_seconds{`+ns+`}`, "{{namespace}}/{{name}}"),
			query(`2 * okgoes_backup_schedule_interval_seconds{`+ns+`} > 0`, "{{namespace}}/{{name}} alert threshold")).
			Description("OkgoesBackupTooOld fires when the age stays above twice the schedule interval.")).
		WithPanel(timeseriesPanel("Backup runs (per hour)", "none",
			query(`sum by (namespace, name, result) (increase(okgoes_backup_runs_total{`+ns+`}[1h]))`, "{{namespace}}/{{name}} {{result}}"))).
		WithPanel(timeseriesPanel("Backup duration (P90)", "s",
			query(`histogram_quantile(0.9, sum by (namespace, name, le) (rate(okgoes_backup_duration_seconds_bucket{`+ns+`}[1h])))`, "{{namespace}}/{{name}}"))).
		WithPanel(timeseriesPanel("Bytes stored by the last backup", "bytes",
			query(`okgoes_backup_bytes{`+ns+`}`, "{{namespace}}/{{name}}"))).
		WithPanel(timeseriesPanel("kopia repository size", "bytes",
			query(`okgoes_backup_repository_bytes{`+ns+`}`, "{{namespace}}/{{name}}"))).
		WithPanel(timeseriesPanel("Missed and skipped schedules", "none",
			query(`okgoes_backup_missed_schedules{`+ns+`}`, "{{namespace}}/{{name}} missed"),
			query(`okgoes_backup_skipped_schedules{`+ns+`}`, "{{namespace}}/{{name}} skipped"))).
		WithRow(row("Redis")).
		WithPanel(statPanel("RedisCaches not Ready", `count(okgoes_rediscache_ready{`+ns+`} == 0) or vector(0)`, 8)).
		WithPanel(statPanel("Without a primary", `count(okgoes_rediscache_primary_available{`+ns+`} == 0) or vector(0)`, 8)).
		WithPanel(statPanel("Failovers (24 h)", `sum(increase(okgoes_rediscache_failovers_total{`+ns+`, reason=~"PrimaryDeleted|PrimaryRestarted|PrimaryUnavailable"}[24h])) or vector(0)`, 8)).
		WithPanel(timeseriesPanel("Ready and desired pods", "none",
			query(`okgoes_rediscache_ready_replicas{`+ns+`}`, "{{namespace}}/{{name}} ready"),
			query(`okgoes_rediscache_desired_replicas{`+ns+`}`, "{{namespace}}/{{name}} desired"))).
		WithPanel(timeseriesPanel("Promotions (per hour)", "none",
			query(`sum by (namespace, name, reason) (increase(okgoes_rediscache_failovers_total{`+ns+`}[1h]))`, "{{namespace}}/{{name}} {{reason}}"))).
		WithPanel(timeseriesPanel("Replication lag", "bytes",
			query(`okgoes_rediscache_replication_lag_bytes{`+ns+`}`, "{{namespace}}/{{pod}}"))).
		WithPanel(timeseriesPanel("Memory used of maxmemory", "percentunit",
			query(`okgoes_rediscache_used_memory_bytes{`+ns+`} / (okgoes_rediscache_maxmemory_bytes{`+ns+`} > 0)`, "{{namespace}}/{{pod}}")).
			Description("Replication mode only. OkgoesRedisMemoryNearMaxmemory fires above 90%.")).
		WithPanel(timeseriesPanel("Memory used", "bytes",
			query(`okgoes_rediscache_used_memory_bytes{`+ns+`}`, "{{namespace}}/{{pod}}"))).
		WithPanel(timeseriesPanel("Evicted keys per second", "ops",
			query(`sum by (namespace, name) (rate(okgoes_rediscache_evicted_keys{`+ns+`}[$__rate_interval]))`, "{{namespace}}/{{name}}")))
}

// query is a Prometheus range query of the dashboard's data source.
func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(expr).LegendFormat(legend).Range().Datasource(datasource)
}

func timeseriesPanel(title, unit string, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Id(nextID()).Title(title).Unit(unit).Datasource(datasource).Height(8).Span(8)
	for _, q := range queries {
		p.WithTarget(q)
	}
	return p
}

// statPanel is a small panel with one instant value.
// The SDK lays panels out left to right and wraps once a line is full (24 columns): each line
// holds panels of one width that divides 24 (stats 6, 8 or 12 wide, time series 8).
func statPanel(title, expr string, width uint32) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Id(nextID()).Title(title).Unit("none").Datasource(datasource).Height(4).Span(width).
		WithTarget(prometheus.NewDataqueryBuilder().Expr(expr).Instant().Datasource(datasource))
}

// lastID numbers the panels and rows in the order they are made (Grafana wants them unique).
var lastID uint32

func nextID() uint32 {
	lastID++
	return lastID
}

func row(title string) *dashboard.RowBuilder { return dashboard.NewRowBuilder(title).Id(nextID()) }
