package pvcrestore

import (
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// failedSeries is the okgoes_restore_failed series of the PVCRestore ns/name, as "reason=value".
func failedSeries(t *testing.T, ns, name string) []string {
	t.Helper()
	ch := make(chan prometheus.Metric, 100)
	go func() { restoreFailedGauge.Collect(ch); close(ch) }()
	var out []string
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{}
		for _, l := range pb.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["namespace"] == ns && labels["name"] == name {
			out = append(out, fmt.Sprintf("%s=%g", labels["reason"], pb.GetGauge().GetValue()))
		}
	}
	slices.Sort(out)
	return out
}
