package main

import (
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
	"time"
)

type report struct {
	flags       flags
	start       time.Time
	initialSync convergence
	restBackups restWindow
	caches      convergence
	restCaches  restWindow
	schedule    scheduleLag
	restActive  restWindow
	foreign     foreign
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func (r *report) print(w io.Writer) {
	f := r.flags
	fmt.Fprintf(w, "## Scale run %s (%d CPUs)\n\n", r.start.UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU())
	fmt.Fprintf(w, "`go run ./bench/scale -backups %d -caches %d -scheduled %d -foreign %d -rest %v`\n\n",
		f.backups, f.caches, f.scheduled, f.foreign, f.rest)

	fmt.Fprintln(w, "| phase | objects | time | API requests / object | writes / object (by verb) | 404s / object | S3 calls | manager RSS |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, c := range []convergence{r.initialSync, r.caches} {
		if c.n == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %.1f s | %.2f | %s | %s | %d (%s) | %s |\n", c.name, c.n, c.took.Seconds(), c.requests.PerObject,
			perObject(c.requests.Writes, c.n), perObject(c.requests.NotFound, c.n), sum(c.s3), counts(c.s3), mib(c.rss))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "API requests by verb and resource, per object:")
	fmt.Fprintln(w)
	for _, c := range []convergence{r.initialSync, r.caches} {
		if c.n > 0 {
			fmt.Fprintf(w, "- %s: %s\n", c.name, perObject(c.requests.ByVerbRes, c.n))
		}
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "| at rest | objects | window | reconciles/s | API requests/s | writes | S3 calls/s | RSS | heap in use |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, s := range []restWindow{r.restBackups, r.restCaches, r.restActive} {
		if s.n == 0 {
			continue
		}
		secs := s.window.Seconds()
		fmt.Fprintf(w, "| %s | %d | %.0f s | %s | %.2f | %d | %.2f | %s | %s |\n", s.name, s.n, secs, rates(s.reconciles),
			float64(s.requests.Total)/secs, sum(s.requests.Writes), float64(sum(s.s3))/secs, mib(s.rss), mib(s.heap))
	}
	fmt.Fprintln(w)
	for _, s := range []restWindow{r.restBackups, r.restCaches, r.restActive} {
		if s.n > 0 && s.requests.Total > 0 {
			fmt.Fprintf(w, "- %s, requests per object over the window: %s\n", s.name, perObject(s.requests.ByVerbRes, s.n))
		}
	}
	fmt.Fprintln(w)

	if s := r.schedule; s.n > 0 {
		fmt.Fprintf(w, "Schedule lag of %d PVCBackups due at the same minute (all converged %.0f s before it; %d Jobs created): "+
			"p50 %.2f s, p90 %.2f s, p99 %.2f s, max %.2f s. Per run start: %.2f API requests (%s), %.2f S3 calls (%s); "+
			"the API server answered the manager's requests in %.0f ms on average. "+
			"The floor: the harness alone created %d suspended Jobs, %d at a time, in %.2f s, "+
			"and %d copies of the manager's mover Jobs in %.2f s.\n\n",
			s.n, s.convergedBefore.Seconds(), s.created, s.p50.Seconds(), s.p90.Seconds(), s.p99.Seconds(), s.mx.Seconds(),
			s.requests.PerObject, perObject(s.requests.ByVerbRes, s.n), float64(sum(s.s3))/float64(s.n), counts(s.s3),
			float64(s.requests.MeanLatency)/float64(time.Millisecond), s.n, creators, s.floor.Seconds(), s.created, s.moverFloor.Seconds())
	}
	if x := r.foreign; x.n > 0 {
		fmt.Fprintf(w, "%d unrelated ConfigMaps (1 KiB each): manager RSS %s → %s (%+.0f %%), heap in use %s → %s; manager requests meanwhile: %d.\n",
			x.n, mib(x.rssBefore), mib(x.rssAfter), 100*float64(x.rssAfter-x.rssBefore)/float64(max(x.rssBefore, 1)),
			mib(x.heapBefore), mib(x.heapAfter), x.requests.Total)
	}
}

func rates(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
