package main

import (
	"fmt"
	"io"
	"strings"
)

const mib = 1 << 20

// targets evaluates the targets that apply to the dataset.
func targets(r datasetResults) []target {
	var t []target
	first, okFirst := r.Steps["kopia/first-backup"]
	second, okSecond := r.Steps["kopia/second-backup"]
	if okFirst && okSecond {
		t = append(t,
			target{"second backup uploads ≤ 0.02 × volume",
				fmt.Sprintf("%.4f × volume (%.1f MiB)", float64(second.Uploaded)/float64(r.Bytes), float64(second.Uploaded)/mib),
				float64(second.Uploaded) <= 0.02*float64(r.Bytes)},
			target{"second backup time ≤ 0.15 × first",
				fmt.Sprintf("%.3f × (%.1f s / %.1f s)", second.Seconds/first.Seconds, second.Seconds, first.Seconds),
				second.Seconds <= 0.15*first.Seconds})
	}
	if rf, ok := r.Steps["restic/first-backup"]; ok && okFirst {
		t = append(t, target{"first backup time ≤ restic / 1.5",
			fmt.Sprintf("%.1f s vs restic %.1f s / 1.5 = %.1f s (restic/kopia = %.2f)", first.Seconds, rf.Seconds, rf.Seconds/1.5, rf.Seconds/first.Seconds),
			first.Seconds <= rf.Seconds/1.5})
	}
	if strings.HasPrefix(r.Name, "small-") && r.Files >= 200_000 {
		var peak int64
		for k, m := range r.Steps {
			if strings.HasPrefix(k, "kopia/") {
				peak = max(peak, m.PeakRSS)
			}
		}
		t = append(t, target{"mover peak RSS ≤ 256 MiB", fmt.Sprintf("%.0f MiB", float64(peak)/mib), peak <= 256*mib})
	}
	kr, okK := r.Steps["kopia/restore"]
	if rr, ok := r.Steps["restic/restore"]; ok && okK {
		t = append(t, target{"restore at least as fast as restic",
			fmt.Sprintf("%.1f s vs restic %.1f s (restic/kopia = %.2f)", kr.Seconds, rr.Seconds, rr.Seconds/kr.Seconds),
			kr.Seconds <= rr.Seconds})
	}
	for _, e := range []string{"kopia", "restic"} {
		if v, ok := r.Identical[e]; ok {
			t = append(t, target{e + " restored tree identical", v, v == "identical"})
		}
	}
	return t
}

func printMarkdown(w io.Writer, r datasetResults) {
	fmt.Fprintf(w, "\n### %s: %d files, %.0f MiB (%d rewritten)\n\n", r.Name, r.Files, float64(r.Bytes)/mib, r.Rewritten)
	if _, ok := r.Steps[archiveNew+"/backup"]; ok {
		fmt.Fprintln(w, "| step | archive (mover) | archive (base mover) | tar \\| PutObject |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for _, s := range []string{"backup", "restore"} {
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", s, cell(r, archiveNew+"/"+s), cell(r, archiveBase+"/"+s), cell(r, tarPut+"/"+s))
		}
	} else {
		fmt.Fprintln(w, "| step | kopia (mover) | restic |")
		fmt.Fprintln(w, "|---|---|---|")
		for _, s := range []string{"first-backup", "second-backup", "restore"} {
			fmt.Fprintf(w, "| %s | %s | %s |\n", s, cell(r, "kopia/"+s), cell(r, "restic/"+s))
		}
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

func cell(r datasetResults, key string) string {
	m, ok := r.Steps[key]
	switch {
	case !ok:
		return "—"
	case m.Error != "":
		return "failed"
	}
	s := fmt.Sprintf("%.1f s (CPU %.1f s), %.0f MiB RSS", m.Seconds, m.CPUSeconds, float64(m.PeakRSS)/mib)
	if m.Uploaded > 0 {
		s += fmt.Sprintf(", %.1f MiB uploaded", float64(m.Uploaded)/mib)
	}
	return s
}
