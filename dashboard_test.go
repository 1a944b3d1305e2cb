package main

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"
)

// dashboardFile is the Grafana dashboard make dashboard generates (hack/tools/dashboard) and
// config/grafana ships in a ConfigMap; hack/verify-generated.sh keeps it in step with its generator.
const dashboardFile = "config/grafana/okgoes-operator.json"

// grafanaPanel is the part of a dashboard panel the tests read.
type grafanaPanel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

type grafanaDashboard struct {
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// labelValues is the selector of a label_values(selector, label) variable query.
var labelValues = regexp.MustCompile(`^label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\)$`)

// TestDashboardReadsOnlyExportedMetrics: every query of the dashboard (panels and variables)
// names only metrics the manager registers, so a renamed or dropped metric fails here rather
// than leaving an empty panel.
func TestDashboardReadsOnlyExportedMetrics(t *testing.T) {
	d := readDashboard(t)
	n := 0
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			n++
			if target.Expr == "" {
				t.Errorf("panel %q: a query without expr", p.Title)
			}
			for _, name := range metricNames(target.Expr) {
				if err := registered(name); err != nil {
					t.Errorf("panel %q: %v", p.Title, err)
				}
			}
		}
	}
	for _, v := range d.Templating.List {
		q, _ := v.Query.(string)
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q)
			continue
		}
		n++
		for _, name := range metricNames(m[1]) {
			if err := registered(name); err != nil {
				t.Errorf("variable %s: %v", v.Name, err)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d queries read from %s", n, dashboardFile)
	}
}

// TestDashboardLayout: every panel has a unique id, fits the 24 columns of Grafana's grid and
// overlaps no other; every panel but a row has a query.
func TestDashboardLayout(t *testing.T) {
	d := readDashboard(t)
	ids := map[int]string{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	for _, p := range d.Panels {
		if other, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Fatalf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				taken[cell{x, y}] = p.Title
			}
		}
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
}
