package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"
)

// The alerts ship as a PrometheusRule (config/prometheus/alerts.yaml); their unit tests are
// promtool's (config/prometheus/tests). promtool is built from github.com/prometheus/prometheus
// into bin/ (make promtool, a prerequisite of make test).
const (
	alertsFile     = "config/prometheus/alerts.yaml"
	alertTestsDir  = "config/prometheus/tests"
	rulesFileInTmp = "alerts.rules.yaml" // the name the tests' rule_files give the rules
)

// prometheusRule is the part of a PrometheusRule the tests read.
type prometheusRule struct {
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

func readAlerts(t *testing.T) (prometheusRule, []byte) {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rule prometheusRule
	if err := yaml.Unmarshal(raw, &rule); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	spec, err := yaml.Marshal(doc["spec"])
	if err != nil {
		t.Fatal(err)
	}
	return rule, spec
}

// promtool is bin/promtool; the test fails without it (make test builds it first).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("bin/promtool")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v: build it with make promtool (make test does)", err)
	}
	// The version make promtool stamps, against the one hack/tools/promtool/go.mod pins.
	out, err := exec.Command(p, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool --version: %v\n%s", err, out)
	}
	mod, err := os.ReadFile("hack/tools/promtool/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	pinned := regexp.MustCompile(`(?m)^(?:require )?\s*github\.com/prometheus/prometheus (v\S+)`).FindSubmatch(mod)
	if pinned == nil {
		t.Fatal("hack/tools/promtool/go.mod pins no github.com/prometheus/prometheus")
	}
	if want := "promtool, version " + string(pinned[1]) + " "; !strings.HasPrefix(string(out), want) {
		t.Fatalf("bin/promtool is not %s (%q): rm bin/promtool && make promtool", pinned[1], strings.SplitN(string(out), "\n", 2)[0])
	}
	return p
}

// TestAlertRules: promtool accepts the rules of the PrometheusRule (check rules) and every
// alert's unit tests pass (test rules), with the series the operator exports.
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	_, spec := readAlerts(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, rulesFileInTmp), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := filepath.Glob(filepath.Join(alertTestsDir, "*.yaml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no promtool tests in %s: %v", alertTestsDir, err)
	}
	for _, f := range tests {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
	run("check", "rules", rulesFileInTmp)
	args := []string{"test", "rules"}
	for _, f := range tests {
		args = append(args, filepath.Base(f))
	}
	run(args...)
}

// TestEveryAlertIsTestedAndHasARunbook: each alert has a firing test in config/prometheus/tests,
// a severity, a summary and description, and a runbook_url pointing at its own section of
// docs/alerts.md, which exists.
func TestEveryAlertIsTestedAndHasARunbook(t *testing.T) {
	rule, _ := readAlerts(t)
	var tests strings.Builder
	files, _ := filepath.Glob(filepath.Join(alertTestsDir, "*.yaml"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tests.Write(data)
	}
	runbooks, err := os.ReadFile("docs/alerts.md")
	if err != nil {
		t.Fatal(err)
	}
	const base = "https://github.com/okgoes/okgoes-operator/blob/main/docs/alerts.md#"
	n := 0
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !strings.Contains(tests.String(), "alertname: "+r.Alert+"\n") {
				t.Errorf("%s: no promtool test (alertname: %s) in %s", r.Alert, r.Alert, alertTestsDir)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: summary or description missing", r.Alert)
			}
			if want := base + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !strings.Contains(string(runbooks), "\n## "+r.Alert+"\n") {
				t.Errorf("%s: no section '## %s' in docs/alerts.md", r.Alert, r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatal("no alerts read")
	}
}

// TestAlertsReadOnlyExportedMetrics: every metric an alert names is registered by the manager
// (the registry main.go's packages fill; up is Prometheus' own), so renaming or dropping a metric
// fails here rather than silencing an alert.
func TestAlertsReadOnlyExportedMetrics(t *testing.T) {
	rule, _ := readAlerts(t)
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			for _, name := range metricNames(r.Expr) {
				if err := registered(name); err != nil {
					t.Errorf("%s: %v", r.Alert, err)
				}
			}
		}
	}
}

// prometheusOwn are series Prometheus makes itself for each target.
var prometheusOwn = []string{"up", "scrape_duration_seconds", "scrape_samples_scraped"}

// registered tells whether name is a series of the manager's registry (metrics.Registry): it
// registers a probe collector under that name, which the registry refuses when a collector
// already describes the name. Histogram series (_bucket, _sum, _count) count under the
// histogram's name.
func registered(name string) error {
	if slices.Contains(prometheusOwn, name) {
		return nil
	}
	for _, candidate := range []string{name, strings.TrimSuffix(name, "_bucket"), strings.TrimSuffix(name, "_sum"), strings.TrimSuffix(name, "_count")} {
		probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: candidate, Help: "probe of TestAlertsReadOnlyExportedMetrics"})
		err := metrics.Registry.Register(probe)
		if err == nil {
			metrics.Registry.Unregister(probe)
			continue
		}
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) || strings.Contains(err.Error(), "already exists") || strings.Contains(err.Error(), "previously registered") {
			return nil
		}
		return fmt.Errorf("probe of %s: %w", candidate, err)
	}
	return fmt.Errorf("%s is not a metric the manager registers", name)
}

var (
	// promqlStrings and promqlMatchers are what metricNames drops before it looks for names:
	// quoted strings, label matchers, range and subquery brackets, and the label lists of
	// by/without/on/ignoring/group_left/group_right.
	promqlStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promqlMatchers  = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promqlLabelList = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlToken     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*\s*\(?|[0-9][0-9A-Za-z.]*`)
	promqlKeywords  = []string{"and", "or", "unless", "bool", "offset", "inf", "nan", "Inf", "NaN"}
)

// metricNames is the metric names a PromQL expression selects: the identifiers that are neither
// functions or aggregations (followed by "("), keywords, numbers nor durations. It is written
// for the expressions of this repository (alerts, dashboard), not as a PromQL parser.
func metricNames(expr string) []string {
	s := promqlStrings.ReplaceAllString(expr, `""`)
	s = promqlLabelList.ReplaceAllString(s, " ")
	s = promqlMatchers.ReplaceAllString(s, " ")
	var names []string
	for _, tok := range promqlToken.FindAllString(s, -1) {
		if tok[0] >= '0' && tok[0] <= '9' || strings.HasSuffix(tok, "(") {
			continue
		}
		if tok = strings.TrimSpace(tok); slices.Contains(promqlKeywords, tok) {
			continue
		}
		if !slices.Contains(names, tok) {
			names = append(names, tok)
		}
	}
	return names
}

// TestMetricNames pins metricNames on the shapes the alerts and the dashboard use.
func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (namespace, controller) (rate(controller_runtime_reconcile_total{job=~".*x.*", result="error"}[5m])) > 0.01`: {"controller_runtime_reconcile_total"},
		`absent(up{job=~".*okgoes-operator.*"} == 1)`:                                              {"up"},
		`count(up == 1) unless on() (max(leader_election_master_status{name="a"}) == 1)`:           {"up", "leader_election_master_status"},
		`a_bytes / (b_bytes > 0) > 0.9`:                                                            {"a_bytes", "b_bytes"},
		`histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket[5m])))`:                       {"x_seconds_bucket"},
		`okgoes_rediscache_replication_lag_bytes > 16 * 1024 * 1024`:                               {"okgoes_rediscache_replication_lag_bytes"},
		`(time() - t_seconds offset 1h) > 2 * (i_seconds > 0) and on (namespace, name) c{r="a b"}`: {"t_seconds", "i_seconds", "c"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%s) = %v, want %v", expr, got, want)
		}
	}
	if err := registered("okgoes_no_such_metric"); err == nil {
		t.Error("registered accepts a name no collector has")
	}
	for _, name := range []string{"controller_runtime_reconcile_total", "workqueue_depth", "okgoes_backup_condition", "okgoes_backup_duration_seconds_bucket"} {
		if err := registered(name); err != nil {
			t.Error(err)
		}
	}
}
