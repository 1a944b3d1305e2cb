//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// TestAlertsFireInARealPrometheus: a real Prometheus server (bin/prometheus, built from
// github.com/prometheus/prometheus like promtool, in the image okgoes.local/prometheus:e2e) runs as a
// pod with a ServiceAccount bound to the metrics-reader ClusterRole `make deploy` installs, scrapes
// the manager's metrics Service over HTTPS with its token the way config/prometheus/monitor.yaml
// asks (honor_labels, job = the Service's name) and evaluates the rules of
// config/prometheus/alerts.yaml as shipped, with one change: every `for` is cut to 5 s, so that the
// story waits seconds instead of the production durations (promtool's unit tests, TestAlertRules,
// cover the durations). Then, on real pods:
//   - a PVCBackup whose S3 works is Ready and no alert fires for it; its MinIO pod is deleted (the
//     Service stays, without endpoints: S3 unreachable), a run is triggered, and a backup alert
//     fires for it (OkgoesBackupFailing or OkgoesBackupNotReady, by where the outage is met);
//   - the primary pod of a RedisCache in Replication mode is deleted and OkgoesRedisFailover fires
//     for the cache with reason PrimaryDeleted.
func TestAlertsFireInARealPrometheus(t *testing.T) {
	alongside(t)
	ns := namespace(t, "e2e-alerts")
	prom := deployPrometheus(t, ns)
	prom.waitTargetUp(t)

	// A PVCBackup that can back up: Ready, and no alert for it.
	s3 := deployMinIO(t, ns)
	claim(t, ns, "data")
	backup := object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCBackup
metadata: {name: watched, namespace: %s}
spec:
  pvcName: data
  schedule: "0 2 * * *"
  s3Bucket: %s
  engine: Archive
  s3:
    endpoint: %q
    insecure: true
    credentialsSecretRef: {name: %s}
`, ns, s3.bucket, s3.endpoint, s3.secret))
	must(t, k8s.Create(ctx, backup))
	eventually(t, "PVCBackup Ready", 2*time.Minute, func() (bool, string) {
		got := get(t, backup)
		status, _, _ := condition(got, "Ready")
		return status == "True", statusJSON(got)
	})
	// The backup's series are scraped (okgoes_backup_condition Ready True) before S3 goes away,
	// and no alert is pending or firing for it: the alert below is the outage's, not a leftover.
	prom.waitQuiet(t, ns, "watched", fmt.Sprintf(`okgoes_backup_condition{namespace=%q, name="watched", type="Ready", status="True"} == 1`, ns))

	t.Run("S3 unreachable: a backup alert fires", func(t *testing.T) {
		// A Ready PVCBackup does not poll S3 between runs: the outage shows at the next run,
		// which a manual trigger starts now instead of at 02:00.
		must(t, k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "minio"}},
			client.GracePeriodSeconds(0)))
		must(t, k8s.Patch(ctx, backup, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"trigger":{"manual":"s3-gone"}}}`))))
		start := time.Now()
		var fired promAlert
		eventually(t, "a backup alert firing", 4*time.Minute, func() (bool, string) {
			for _, a := range prom.alerts(t, ns, "watched") {
				if a.State == "firing" {
					fired = a
					return true, ""
				}
			}
			got := get(t, backup)
			_, reason, msg := condition(got, "Ready")
			return false, fmt.Sprintf("alerts %v; Ready %s %q; lastRun %s", prom.alerts(t, ns, "watched"), reason, msg,
				str(got, "status", "lastRun", "result"))
		})
		name, reason := fired.Labels["alertname"], fired.Labels["reason"]
		t.Logf("MEASURED: %s (reason %s) firing %s after the MinIO pod was deleted and a run triggered", name, reason,
			time.Since(start).Round(time.Second))
		// Which one depends on where the outage is met: by the run's mover (the run fails:
		// OkgoesBackupFailing) or by the controller's check of the bucket before the run
		// (Ready=False EndpointUnreachable: OkgoesBackupNotReady).
		switch {
		case name == "OkgoesBackupFailing" && reason == "BackupFailed":
		case name == "OkgoesBackupNotReady" && reason == "EndpointUnreachable":
		default:
			t.Errorf("firing alert %+v: want OkgoesBackupFailing (BackupFailed) or OkgoesBackupNotReady (EndpointUnreachable)", fired)
		}
		if fired.Labels["severity"] != "warning" || !strings.HasSuffix(fired.Annotations["runbook_url"], "docs/alerts.md#"+strings.ToLower(name)) {
			t.Errorf("firing alert %+v: want severity warning and its runbook", fired)
		}
		if !strings.Contains(fired.Annotations["summary"], ns+"/watched") {
			t.Errorf("summary %q does not name the PVCBackup", fired.Annotations["summary"])
		}
	})

	t.Run("primary deleted: OkgoesRedisFailover fires", func(t *testing.T) {
		rc := sample(t, "cache_v1beta1_rediscache.yaml")
		rc.SetNamespace(ns)
		rc.SetName("watched-cache")
		must(t, unstructured.SetNestedField(rc.Object, cfg.redisImage, "spec", "redis", "image"))
		must(t, unstructured.SetNestedField(rc.Object, "Replication", "spec", "mode"))
		must(t, unstructured.SetNestedField(rc.Object, int64(2), "spec", "replicas"))
		must(t, unstructured.SetNestedField(rc.Object, int64(5), "spec", "replication", "failoverAfterSeconds"))
		must(t, k8s.Create(ctx, rc))
		ready := waitForCache(t, rc, 2)
		primary := str(ready, "status", "replication", "primary")
		// The failover counter exists at 0 before the failover, so that increase() sees it; the
		// cache's start (not Ready for a few seconds: OkgoesRedisNotReady with `for` cut to 5 s)
		// has resolved.
		prom.waitQuiet(t, ns, "watched-cache", fmt.Sprintf(`okgoes_rediscache_failovers_total{namespace=%q, name="watched-cache", reason="PrimaryDeleted"} == 0
			and on(namespace, name) okgoes_rediscache_ready == 1`, ns))
		must(t, k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: primary}}))
		start := time.Now()
		var fired promAlert
		eventually(t, "OkgoesRedisFailover firing", 3*time.Minute, func() (bool, string) {
			for _, a := range prom.alerts(t, ns, "watched-cache") {
				if a.Labels["alertname"] == "OkgoesRedisFailover" && a.State == "firing" {
					fired = a
					return true, ""
				}
			}
			return false, fmt.Sprint(prom.alerts(t, ns, "watched-cache"))
		})
		t.Logf("MEASURED: OkgoesRedisFailover firing %s after the primary pod %s was deleted", time.Since(start).Round(time.Second), primary)
		if fired.Labels["reason"] != "PrimaryDeleted" || fired.Labels["severity"] != "warning" ||
			!strings.HasSuffix(fired.Annotations["runbook_url"], "docs/alerts.md#okgoesredisfailover") {
			t.Errorf("firing alert %+v: want reason PrimaryDeleted, severity warning and the runbook", fired)
		}
	})
}

// prometheus is a Prometheus server pod of the test, reached through a port-forward.
type prometheus struct {
	addr string
	http *http.Client
}

// promAlert is an alert of Prometheus' /api/v1/alerts.
type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
}

// deployPrometheus runs Prometheus in ns: ServiceAccount + ClusterRoleBinding to metrics-reader,
// a ConfigMap with prometheus.yml and the shipped rules (for: 5s), and the pod.
func deployPrometheus(t *testing.T, ns string) *prometheus {
	t.Helper()
	must(t, k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prometheus"}}))
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-prometheus-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cfg.operatorPrefix + "metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "prometheus"}},
	}
	must(t, k8s.Create(ctx, crb))
	t.Cleanup(func() {
		if err := k8s.Delete(ctx, crb); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s: %v", crb.Name, err)
		}
	})
	svc := &corev1.Service{}
	must(t, k8s.Get(ctx, client.ObjectKey{Namespace: cfg.operatorNS, Name: cfg.operatorPrefix + "controller-manager-metrics-service"}, svc))
	// What config/prometheus/monitor.yaml asks of the Prometheus Operator, written out: the job is
	// the Service's name, the operator's labels are kept, HTTPS with the ServiceAccount's token.
	config := fmt.Sprintf(`global: {scrape_interval: 5s, evaluation_interval: 5s}
rule_files: [/etc/prometheus/alerts.yaml]
scrape_configs:
- job_name: %s
  honor_labels: true
  scheme: https
  metrics_path: /metrics
  authorization: {credentials_file: /var/run/secrets/kubernetes.io/serviceaccount/token}
  tls_config: {insecure_skip_verify: true}
  static_configs: [{targets: ["%s:8443"]}]
`, svc.Name, svc.Spec.ClusterIP)
	must(t, k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prometheus"},
		Data: map[string]string{"prometheus.yml": config, "alerts.yaml": shippedRules(t, "5s")}}))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prometheus", Labels: map[string]string{"app": "prometheus"}},
		Spec: corev1.PodSpec{
			ServiceAccountName:            "prometheus",
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65534),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "prometheus"}}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			Containers: []corev1.Container{{
				Name: "prometheus", Image: cfg.prometheusImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Args: []string{"--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus",
					"--web.listen-address=:9090"},
				Ports:          []corev1.ContainerPort{{Name: "web", ContainerPort: 9090}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/-/ready", Port: intstr.FromInt32(9090)}}, PeriodSeconds: 1},
				VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/prometheus"}, {Name: "data", MountPath: "/prometheus"}},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	must(t, k8s.Create(ctx, pod))
	eventually(t, "Prometheus ready", 2*time.Minute, func() (bool, string) {
		got := &corev1.Pod{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return false, err.Error()
		}
		if got.Status.Phase == corev1.PodFailed {
			out, _ := kubectl("-n", ns, "logs", "prometheus")
			t.Fatalf("Prometheus failed:\n%s", out)
		}
		return podReady(got), string(got.Status.Phase)
	})
	return &prometheus{addr: portForward(t, ns, "prometheus", 9090), http: &http.Client{Timeout: 10 * time.Second}}
}

// shippedRules is the rule groups of config/prometheus/alerts.yaml (the PrometheusRule's spec) as
// a Prometheus rule file, every `for` replaced by forDuration.
func shippedRules(t *testing.T, forDuration string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(cfg.root, "config", "prometheus", "alerts.yaml"))
	must(t, err)
	var rule struct {
		Spec struct {
			Groups []map[string]any `json:"groups"`
		} `json:"spec"`
	}
	must(t, yaml.Unmarshal(data, &rule))
	n := 0
	for _, g := range rule.Spec.Groups {
		rules, _ := g["rules"].([]any)
		for _, r := range rules {
			if r, ok := r.(map[string]any); ok && r["alert"] != nil {
				r["for"] = forDuration
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("no alert in config/prometheus/alerts.yaml")
	}
	out, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
	must(t, err)
	return string(out)
}

// get does a GET of the Prometheus HTTP API and decodes data of its answer into v.
func (p *prometheus) get(t *testing.T, path string, query url.Values, v any) {
	t.Helper()
	resp, err := p.http.Get("http://" + p.addr + path + "?" + query.Encode())
	must(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(t, err)
	var answer struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &answer); err != nil || answer.Status != "success" {
		t.Fatalf("GET %s %v: %d %s", path, query, resp.StatusCode, body)
	}
	must(t, json.Unmarshal(answer.Data, v))
}

// count is the number of series of an instant query, and the answer for a failure message.
func (p *prometheus) count(t *testing.T, query string) (int, string) {
	t.Helper()
	var data struct {
		Result []json.RawMessage `json:"result"`
	}
	p.get(t, "/api/v1/query", url.Values{"query": {query}}, &data)
	return len(data.Result), fmt.Sprintf("%s: %d series", query, len(data.Result))
}

// alerts are the pending and firing alerts of the object ns/name.
func (p *prometheus) alerts(t *testing.T, ns, name string) []promAlert {
	t.Helper()
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	p.get(t, "/api/v1/alerts", nil, &data)
	var of []promAlert
	for _, a := range data.Alerts {
		if a.Labels["namespace"] == ns && a.Labels["name"] == name {
			of = append(of, a)
		}
	}
	return of
}

// waitQuiet waits until query (the object's healthy series) has one series and no alert of
// ns/name is pending or firing.
func (p *prometheus) waitQuiet(t *testing.T, ns, name, query string) {
	t.Helper()
	eventually(t, "healthy series of "+ns+"/"+name+" and no alert", 2*time.Minute, func() (bool, string) {
		n, state := p.count(t, query)
		alerts := p.alerts(t, ns, name)
		return n == 1 && len(alerts) == 0, fmt.Sprintf("%s; alerts %v", state, alerts)
	})
}

// waitTargetUp waits until Prometheus scrapes the manager (up == 1), with the target's last error
// when it does not: the token, the ClusterRoleBinding and TLS are part of the story.
func (p *prometheus) waitTargetUp(t *testing.T) {
	t.Helper()
	eventually(t, "the manager scraped by Prometheus (up == 1)", 2*time.Minute, func() (bool, string) {
		var data struct {
			ActiveTargets []struct {
				Health    string `json:"health"`
				LastError string `json:"lastError"`
				ScrapeURL string `json:"scrapeUrl"`
			} `json:"activeTargets"`
		}
		p.get(t, "/api/v1/targets", url.Values{"state": {"active"}}, &data)
		for _, target := range data.ActiveTargets {
			if target.Health == "up" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("targets: %+v", data.ActiveTargets)
	})
	if n, state := p.count(t, `up{job=~".*okgoes-operator.*"} == 1`); n != 1 {
		t.Fatalf("the alerts' job matcher does not match the scrape job: %s", state)
	}
}
