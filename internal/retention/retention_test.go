package retention

import (
	"strings"
	"testing"
	"time"
)

// daily makes one backup per day at 02:00 UTC from start, n days.
func daily(start string, n int) []Backup {
	t0, _ := time.Parse(time.RFC3339, start)
	var out []Backup
	for i := 0; i < n; i++ {
		t := t0.AddDate(0, 0, i)
		out = append(out, Backup{ID: t.Format("20060102T150405Z"), Time: t})
	}
	return out
}

func ids(bs []Backup) string {
	var s []string
	for _, b := range bs {
		s = append(s, b.ID[:8])
	}
	return strings.Join(s, " ")
}

func TestSelect(t *testing.T) {
	tests := []struct {
		name     string
		backups  []Backup
		policy   Policy
		wantKeep string
	}{
		{"no policy keeps everything", daily("2026-12-01T02:00:00Z", 3), Policy{}, "20261203 20261202 20261201"},
		{"keepLast 3 of 10", daily("2026-12-01T02:00:00Z", 10), Policy{Last: 3}, "20261210 20261209 20261208"},
		{"keepLast larger than the list", daily("2026-12-01T02:00:00Z", 2), Policy{Last: 5}, "20261202 20261201"},
		{"keepDaily with two backups a day keeps the newest of each day",
			append(daily("2026-12-01T02:00:00Z", 3), daily("2026-12-01T14:00:00Z", 3)...), Policy{Daily: 2}, "20261203 20261202"},
		{"keepWeekly 2 over 3 weeks (ISO weeks start Monday)", daily("2026-11-30T02:00:00Z", 21), Policy{Weekly: 2},
			"20261220 20261213"},
		{"keepMonthly 3 over a year of Sundays", weekly("2026-01-04T02:00:00Z", 52), Policy{Monthly: 3},
			"20261227 20261129 20261025"},
		{"rules add up: last 2 plus monthly 2", daily("2026-10-20T02:00:00Z", 50), Policy{Last: 2, Monthly: 2},
			"20261208 20261207 20261130"},
		{"the newest backup always stays", daily("2026-12-01T02:00:00Z", 4), Policy{Monthly: 0, Weekly: 0, Daily: 0, Last: 0}, "20261204 20261203 20261202 20261201"},
		{"empty list", nil, Policy{Last: 3}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keep, prune := Select(tt.backups, tt.policy, time.UTC)
			if got := ids(keep); got != tt.wantKeep {
				t.Errorf("keep = %s\nwant   %s", got, tt.wantKeep)
			}
			if len(keep)+len(prune) != len(tt.backups) {
				t.Errorf("%d kept + %d pruned != %d backups", len(keep), len(prune), len(tt.backups))
			}
		})
	}
}

func TestSelectUsesTheScheduleTimeZone(t *testing.T) {
	// 23:30 UTC on Dec 1 and 00:30 UTC on Dec 2 are the same day (Dec 2) in Tokyo.
	bs := []Backup{
		{ID: "a", Time: time.Date(2026, 12, 1, 23, 30, 0, 0, time.UTC)},
		{ID: "b", Time: time.Date(2026, 12, 2, 0, 30, 0, 0, time.UTC)},
	}
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	if keep, _ := Select(bs, Policy{Daily: 2}, tokyo); len(keep) != 1 || keep[0].ID != "b" {
		t.Errorf("Tokyo: keep %v, want only b", keep)
	}
	if keep, _ := Select(bs, Policy{Daily: 2}, time.UTC); len(keep) != 2 {
		t.Errorf("UTC: keep %v, want both", keep)
	}
}

func weekly(start string, n int) []Backup {
	t0, _ := time.Parse(time.RFC3339, start)
	var out []Backup
	for i := 0; i < n; i++ {
		t := t0.AddDate(0, 0, 7*i)
		out = append(out, Backup{ID: t.Format("20060102T150405Z"), Time: t})
	}
	return out
}
