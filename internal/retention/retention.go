// Package retention decides which backups to keep, with restic's semantics: a backup kept by any
// rule survives. It is pure: the controller lists the backups, asks Select, and deletes the rest.
package retention

import (
	"fmt"
	"sort"
	"time"
)

// Policy is how many backups to keep per rule. Zero disables a rule; a Policy with every rule
// zero keeps everything.
type Policy struct {
	Last, Daily, Weekly, Monthly int
}

// Backup is one restorable backup (one with a manifest).
type Backup struct {
	ID   string
	Time time.Time
}

// Select splits backups into those to keep and those to prune. Periods (days, ISO weeks, months)
// are taken in loc. For each period rule, the newest backup of each of the newest N periods that
// have a backup is kept. The newest backup is always kept, so pruning never deletes the only
// backup there is.
func Select(backups []Backup, p Policy, loc *time.Location) (keep, prune []Backup) {
	sorted := append([]Backup(nil), backups...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Time.After(sorted[j].Time) })
	if p == (Policy{}) {
		return sorted, nil
	}
	kept := map[string]bool{}
	if len(sorted) > 0 {
		kept[sorted[0].ID] = true
	}
	for i := 0; i < p.Last && i < len(sorted); i++ {
		kept[sorted[i].ID] = true
	}
	byPeriod := func(n int, period func(time.Time) string) {
		seen := map[string]bool{}
		for _, b := range sorted {
			if len(seen) == n {
				return
			}
			key := period(b.Time.In(loc))
			if !seen[key] {
				seen[key] = true
				kept[b.ID] = true
			}
		}
	}
	byPeriod(p.Daily, func(t time.Time) string { return t.Format("2006-01-02") })
	byPeriod(p.Weekly, func(t time.Time) string { y, w := t.ISOWeek(); return fmt.Sprintf("%d-W%02d", y, w) })
	byPeriod(p.Monthly, func(t time.Time) string { return t.Format("2006-01") })
	for _, b := range sorted {
		if kept[b.ID] {
			keep = append(keep, b)
		} else {
			prune = append(prune, b)
		}
	}
	return keep, prune
}
