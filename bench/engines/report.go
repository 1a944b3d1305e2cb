package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

const mib = 1 << 20

var steps = []string{"first-backup", "second-backup", "restore"}

// medians is, for each step of the rounds, the median of each of its figures taken alone (a
// step that failed in a round is left out of that round).
func medians(rounds []map[string]measurement) map[string]measurement {
	all := map[string][]measurement{}
	for _, r := range rounds {
		for k, m := range r {
			if m.Error == "" {
				all[k] = append(all[k], m)
			}
		}
	}
	out := map[string]measurement{}
	for k, ms := range all {
		out[k] = measurement{
			Seconds:    median(ms, func(m measurement) float64 { return m.Seconds }),
			CPUSeconds: median(ms, func(m measurement) float64 { return m.CPUSeconds }),
			PeakRSS:    int64(median(ms, func(m measurement) float64 { return float64(m.PeakRSS) })),
			Uploaded:   int64(median(ms, func(m measurement) float64 { return float64(m.Uploaded) })),
			Stored:     int64(median(ms, func(m measurement) float64 { return float64(m.Stored) })),
		}
	}
	return out
}

func median(ms []measurement, v func(measurement) float64) float64 {
	xs := make([]float64, len(ms))
	for i, m := range ms {
		xs[i] = v(m)
	}
	slices.Sort(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}

// spread is the slowest round's time of step ÷ the median's, and the number of rounds.
func spread(r datasetResults, key string) (float64, int) {
	var slowest float64
	n := 0
	for _, round := range r.Rounds {
		if m, ok := round[key]; ok && m.Error == "" {
			slowest = max(slowest, m.Seconds)
			n++
		}
	}
	if med, ok := r.Steps[key]; ok && med.Seconds > 0 {
		return slowest / med.Seconds, n
	}
	return 0, n
}

// manyFiles says whether the dataset is a tree of many files, where issue 35 wants a restore
// within 2 × raw `get | tar x`.
func manyFiles(r datasetResults) bool { return r.Files >= 1000 }

// targets evaluates issue 35's targets that apply to the dataset.
func targets(r datasetResults) []target {
	var t []target
	mr, okM := r.Steps[toolMover+"/restore"]
	if rr, ok := r.Steps[toolRestic+"/restore"]; ok && okM {
		t = append(t, target{"restore ≤ 1.0 × restic's time",
			fmt.Sprintf("%.2f × (%.1f s vs %.1f s)", mr.Seconds/rr.Seconds, mr.Seconds, rr.Seconds), mr.Seconds <= rr.Seconds})
	}
	if raw, ok := r.Steps[toolRaw+"/restore"]; ok && okM && manyFiles(r) {
		t = append(t, target{"restore ≤ 2 × raw get | tar x (a tree of many files)",
			fmt.Sprintf("%.2f × (%.1f s vs %.1f s)", mr.Seconds/raw.Seconds, mr.Seconds, raw.Seconds), mr.Seconds <= 2*raw.Seconds})
	}
	if s, n := spread(r, toolMover+"/restore"); n >= 3 {
		t = append(t, target{fmt.Sprintf("slowest of %d restores ≤ 1.5 × the median", n), fmt.Sprintf("%.2f ×", s), s <= 1.5})
	}
	ms, okS := r.Steps[toolMover+"/second-backup"]
	if rs, ok := r.Steps[toolRestic+"/second-backup"]; ok && okS {
		if r.Name == "source-tree" || strings.HasPrefix(r.Name, "logs") {
			t = append(t, target{"stored bytes ≤ 1.05 × restic's",
				fmt.Sprintf("%.2f × (%.1f MiB vs %.1f MiB)", ratio(ms.Stored, rs.Stored), float64(ms.Stored)/mib, float64(rs.Stored)/mib),
				float64(ms.Stored) <= 1.05*float64(rs.Stored)})
		}
		if r.Name == "vm-image" {
			t = append(t, target{"second backup uploads ≤ 1.1 × restic's",
				fmt.Sprintf("%.2f × (%.1f MiB vs %.1f MiB)", ratio(ms.Uploaded, rs.Uploaded), float64(ms.Uploaded)/mib, float64(rs.Uploaded)/mib),
				float64(ms.Uploaded) <= 1.1*float64(rs.Uploaded)})
		}
	}
	for _, e := range allTools {
		if v, ok := r.Identical[e]; ok {
			t = append(t, target{e + " restored trees identical", v, v == "identical"})
		}
	}
	return t
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func printMarkdown(w io.Writer, r datasetResults) {
	rounds := ""
	if len(r.Rounds) > 0 {
		rounds = fmt.Sprintf(", %d rounds", len(r.Rounds))
	}
	fmt.Fprintf(w, "\n### %s: %d files, %.0f MiB (%d changed)%s\n\n", r.Name, r.Files, float64(r.Bytes)/mib, r.Rewritten, rounds)
	if _, ok := r.Steps[archiveNew+"/backup"]; ok {
		fmt.Fprintln(w, "| step | archive (mover) | archive (base mover) | tar \\| PutObject |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for _, s := range []string{"backup", "restore"} {
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", s, cell(r, archiveNew+"/"+s), cell(r, archiveBase+"/"+s), cell(r, tarPut+"/"+s))
		}
	} else {
		printTools(w, r)
	}
	fmt.Fprintln(w)
	names := make([]string, 0, len(r.Targets))
	for _, t := range r.Targets {
		mark := "missed"
		if t.Met {
			mark = "met"
		}
		names = append(names, fmt.Sprintf("- %s: **%s** — %s", t.What, mark, t.Value))
	}
	fmt.Fprintln(w, strings.Join(names, "\n"))
}

// printTools prints the medians of each tool's steps, then the mover's ratios to the others.
func printTools(w io.Writer, r datasetResults) {
	var tools []string
	for _, t := range allTools {
		for _, s := range steps {
			if _, ok := r.Steps[t+"/"+s]; ok {
				tools = append(tools, t)
				break
			}
		}
	}
	fmt.Fprintf(w, "| step (median: wall (CPU), slowest ÷ median, peak RSS, uploaded / stored) | %s |\n", strings.Join(tools, " | "))
	fmt.Fprintf(w, "|---%s|\n", strings.Repeat("|---", len(tools)))
	for _, s := range steps {
		cells := make([]string, len(tools))
		for i, t := range tools {
			cells[i] = cell(r, t+"/"+s)
		}
		fmt.Fprintf(w, "| %s | %s |\n", s, strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
	var others []string
	for _, t := range tools {
		if t != toolMover {
			others = append(others, t)
		}
	}
	if _, ok := r.Steps[toolMover+"/first-backup"]; !ok || len(others) == 0 {
		return
	}
	fmt.Fprintf(w, "| mover ÷ | %s |\n", strings.Join(others, " | "))
	fmt.Fprintf(w, "|---%s|\n", strings.Repeat("|---", len(others)))
	row := func(what string, v func(m measurement) float64, step string) {
		cells := make([]string, len(others))
		for i, o := range others {
			m, okM := r.Steps[toolMover+"/"+step]
			x, okX := r.Steps[o+"/"+step]
			if cells[i] = "—"; okM && okX && v(x) > 0 {
				cells[i] = fmt.Sprintf("%.2f", v(m)/v(x))
			}
		}
		fmt.Fprintf(w, "| %s | %s |\n", what, strings.Join(cells, " | "))
	}
	secs := func(m measurement) float64 { return m.Seconds }
	row("first backup time", secs, "first-backup")
	row("second backup time", secs, "second-backup")
	row("second backup bytes", func(m measurement) float64 { return float64(m.Uploaded) }, "second-backup")
	row("restore time", secs, "restore")
	row("stored bytes (after the second backup)", func(m measurement) float64 { return float64(m.Stored) }, "second-backup")
	row("stored bytes (after the first backup)", func(m measurement) float64 { return float64(m.Stored) }, "first-backup")
	for _, s := range steps {
		row("peak RSS, "+s, func(m measurement) float64 { return float64(m.PeakRSS) }, s)
	}
}

func cell(r datasetResults, key string) string {
	m, ok := r.Steps[key]
	switch {
	case !ok:
		return "—"
	case m.Error != "":
		return "failed"
	}
	s := fmt.Sprintf("%.1f s (%.1f s)", m.Seconds, m.CPUSeconds)
	if sp, n := spread(r, key); n > 1 {
		s += fmt.Sprintf(", %.2f ×", sp)
	}
	s += fmt.Sprintf(", %.0f MiB", float64(m.PeakRSS)/mib)
	if m.Uploaded > 0 {
		s += fmt.Sprintf(", %.1f / %.1f MiB", float64(m.Uploaded)/mib, float64(m.Stored)/mib)
	}
	return s
}
