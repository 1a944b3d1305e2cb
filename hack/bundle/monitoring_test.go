package main

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// readManifest reads a YAML object of the committed bundle (or of config/).
func readManifest(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(committed.root, path))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestBundleShipsTheMonitoring: the bundle holds the PrometheusRule whose rules promtool tests
// (config/prometheus/alerts.yaml, TestAlertRules), a ServiceMonitor that scrapes the bundle's
// metrics Service (its selector matches the Service's labels, its port is the Service's) keeping
// the operator's labels (honorLabels, which the alerts and the dashboard read), and the Grafana
// dashboard (config/grafana) in a ConfigMap the Grafana sidecar picks up.
func TestBundleShipsTheMonitoring(t *testing.T) {
	rule := readManifest(t, "bundle/manifests/okgoes-operator-controller-manager-alerts_monitoring.coreos.com_v1_prometheusrule.yaml")
	tested := readManifest(t, "config/prometheus/alerts.yaml")
	if !reflect.DeepEqual(rule.Object["spec"], tested.Object["spec"]) {
		t.Error("the bundle's PrometheusRule is not config/prometheus/alerts.yaml: run make bundle")
	}

	monitor := readManifest(t, "bundle/manifests/okgoes-operator-controller-manager-metrics-monitor_monitoring.coreos.com_v1_servicemonitor.yaml")
	svc := readManifest(t, "bundle/manifests/okgoes-operator-controller-manager-metrics-service_v1_service.yaml")
	selector, _, _ := unstructured.NestedStringMap(monitor.Object, "spec", "selector", "matchLabels")
	if len(selector) == 0 {
		t.Fatal("the ServiceMonitor selects no Service")
	}
	for k, v := range selector {
		if svc.GetLabels()[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, the metrics Service has %q", k, v, svc.GetLabels()[k])
		}
	}
	endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "endpoints")
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(endpoints) != 1 || len(ports) != 1 {
		t.Fatalf("%d endpoints, %d Service ports", len(endpoints), len(ports))
	}
	ep, port := endpoints[0].(map[string]any), ports[0].(map[string]any)
	if ep["port"] != port["name"] {
		t.Errorf("the ServiceMonitor scrapes port %v, the Service's is %v", ep["port"], port["name"])
	}
	// The Prometheus Operator names the job after the Service; every alert selects it so.
	if job := regexp.MustCompile(`job=~"(.*?)"`).FindStringSubmatch(fmt.Sprint(tested.Object["spec"])); job == nil ||
		!regexp.MustCompile("^(?:"+job[1]+")$").MatchString(svc.GetName()) {
		t.Errorf("the alerts' job matcher %v does not match the metrics Service %s", job, svc.GetName())
	}
	if ep["honorLabels"] != true {
		t.Error("the ServiceMonitor does not honor the operator's labels (namespace, name, pod of the objects)")
	}

	dashboard := readManifest(t, "bundle/manifests/okgoes-operator-dashboard_v1_configmap.yaml")
	if dashboard.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap's labels %v lack grafana_dashboard: \"1\" (the Grafana sidecar's)", dashboard.GetLabels())
	}
	json, err := os.ReadFile(filepath.Join(committed.root, "config/grafana/okgoes-operator.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(dashboard.Object, "data", "okgoes-operator.json"); got != string(json) {
		t.Error("the bundle's dashboard is not config/grafana/okgoes-operator.json: run make bundle")
	}
}
