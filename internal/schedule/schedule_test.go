package schedule

import (
	"strings"
	"testing"
	"time"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func ptr[T any](v T) *T { return &v }

func mustParse(t *testing.T, spec, tz string) Input {
	t.Helper()
	s, err := Parse(spec, tz)
	if err != nil {
		t.Fatal(err)
	}
	return Input{Schedule: s}
}

func TestDecide(t *testing.T) {
	hourly := func(t *testing.T) Input { return mustParse(t, "0 * * * *", "") }
	tests := []struct {
		name        string
		in          func(*testing.T) Input
		created     string
		last        string
		now         string
		deadline    *time.Duration
		running     bool
		suspended   bool
		wantRun     string
		wantMissed  int
		wantSkipped int
		wantHandled string
		wantNext    string
	}{
		{name: "before the first tick after creation", in: hourly, created: "2026-12-03T10:20:00Z", now: "2026-12-03T10:59:59Z",
			wantNext: "2026-12-03T11:00:00Z"},
		{name: "exactly at the tick", in: hourly, created: "2026-12-03T10:20:00Z", now: "2026-12-03T11:00:00Z",
			wantRun: "2026-12-03T11:00:00Z", wantHandled: "2026-12-03T11:00:00Z", wantNext: "2026-12-03T12:00:00Z"},
		{name: "tick already handled", in: hourly, created: "2026-12-03T10:20:00Z", last: "2026-12-03T11:00:00Z", now: "2026-12-03T11:30:00Z",
			wantNext: "2026-12-03T12:00:00Z"},
		{name: "downtime: one catch-up for the latest tick, the rest missed", in: hourly, created: "2026-12-01T00:00:00Z",
			last: "2026-12-03T01:00:00Z", now: "2026-12-03T06:10:00Z",
			wantRun: "2026-12-03T06:00:00Z", wantMissed: 4, wantHandled: "2026-12-03T06:00:00Z", wantNext: "2026-12-03T07:00:00Z"},
		{name: "past the starting deadline: nothing runs, all missed", in: hourly, created: "2026-12-01T00:00:00Z",
			last: "2026-12-03T01:00:00Z", now: "2026-12-03T06:10:00Z", deadline: ptr(5 * time.Minute),
			wantMissed: 5, wantHandled: "2026-12-03T06:00:00Z", wantNext: "2026-12-03T07:00:00Z"},
		{name: "within the starting deadline: runs late", in: hourly, created: "2026-12-01T00:00:00Z",
			last: "2026-12-03T05:00:00Z", now: "2026-12-03T06:04:00Z", deadline: ptr(5 * time.Minute),
			wantRun: "2026-12-03T06:00:00Z", wantHandled: "2026-12-03T06:00:00Z", wantNext: "2026-12-03T07:00:00Z"},
		{name: "a run is still going: skipped, not missed", in: hourly, created: "2026-12-01T00:00:00Z",
			last: "2026-12-03T05:00:00Z", now: "2026-12-03T06:04:00Z", running: true,
			wantSkipped: 1, wantHandled: "2026-12-03T06:00:00Z", wantNext: "2026-12-03T07:00:00Z"},
		{name: "suspended: nothing runs, nothing counted, tick stays due", in: hourly, created: "2026-12-01T00:00:00Z",
			last: "2026-12-03T05:00:00Z", now: "2026-12-03T08:04:00Z", suspended: true, wantNext: "2026-12-03T09:00:00Z"},
		{name: "time zone field: 02:00 Berlin is 01:00 UTC in winter", in: func(t *testing.T) Input { return mustParse(t, "0 2 * * *", "Europe/Berlin") },
			created: "2026-12-03T00:00:00Z", now: "2026-12-03T01:00:00Z",
			wantRun: "2026-12-03T01:00:00Z", wantHandled: "2026-12-03T01:00:00Z", wantNext: "2026-12-04T01:00:00Z"},
		{name: "CRON_TZ prefix: 02:00 Berlin is 00:00 UTC in summer", in: func(t *testing.T) Input { return mustParse(t, "CRON_TZ=Europe/Berlin 0 2 * * *", "") },
			created: "2026-07-01T12:00:00Z", now: "2026-07-02T00:00:00Z",
			wantRun: "2026-07-02T00:00:00Z", wantHandled: "2026-07-02T00:00:00Z", wantNext: "2026-07-03T00:00:00Z"},
		{name: "DST fall back: a 01:30 New York job runs once on the repeated hour", in: func(t *testing.T) Input { return mustParse(t, "30 1 * * *", "America/New_York") },
			created: "2026-10-31T12:00:00Z", last: "2026-10-31T05:30:00Z", now: "2026-11-01T07:00:00Z",
			// 01:30 EDT (05:30Z) on Nov 1 and, an hour later, 01:30 EST (06:30Z) again: robfig/cron
			// yields both; Parse drops the repeat, so the day has one run, not two.
			wantRun: "2026-11-01T05:30:00Z", wantHandled: "2026-11-01T05:30:00Z", wantNext: "2026-11-02T06:30:00Z"},
		{name: "DST fall back: the repeated hour is not a second tick after the first ran", in: func(t *testing.T) Input { return mustParse(t, "30 1 * * *", "America/New_York") },
			created: "2026-10-31T12:00:00Z", last: "2026-11-01T05:30:00Z", now: "2026-11-01T06:45:00Z",
			wantNext: "2026-11-02T06:30:00Z"},
		{name: "DST spring forward: a 02:30 New York job has no tick on the day 02:30 does not exist", in: func(t *testing.T) Input { return mustParse(t, "30 2 * * *", "America/New_York") },
			created: "2026-03-07T12:00:00Z", last: "2026-03-07T07:30:00Z", now: "2026-03-08T12:00:00Z",
			// Documented limitation (robfig/cron): the next run is 02:30 EDT on Mar 9.
			wantNext: "2026-03-09T06:30:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in(t)
			in.Created, in.Now = at(tt.created), at(tt.now)
			if tt.last != "" {
				in.LastScheduled = ptr(at(tt.last))
			}
			in.StartingDeadline, in.Running, in.Suspended = tt.deadline, tt.running, tt.suspended
			d := Decide(in)
			if got := fmtTime(d.Run); got != tt.wantRun {
				t.Errorf("Run = %s, want %s", got, tt.wantRun)
			}
			if got := fmtTime(d.Handled); got != tt.wantHandled {
				t.Errorf("Handled = %s, want %s", got, tt.wantHandled)
			}
			if d.Missed != tt.wantMissed || d.Skipped != tt.wantSkipped {
				t.Errorf("Missed, Skipped = %d, %d; want %d, %d", d.Missed, d.Skipped, tt.wantMissed, tt.wantSkipped)
			}
			if got := d.Next.UTC().Format(time.RFC3339); got != tt.wantNext {
				t.Errorf("Next = %s, want %s", got, tt.wantNext)
			}
		})
	}
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func TestDecideAfterAYearOfDowntime(t *testing.T) {
	in := mustParse(t, "* * * * *", "")
	in.Created = at("2025-12-03T00:00:00Z")
	in.Now = at("2026-12-03T00:00:30Z")
	d := Decide(in)
	if got := fmtTime(d.Run); got != "2026-12-03T00:00:00Z" {
		t.Errorf("Run = %s, want the latest minute", got)
	}
	if d.Missed != maxCounted-1 {
		t.Errorf("Missed = %d, want the cap %d - 1", d.Missed, maxCounted)
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		schedule, tz, want string
	}{
		{"0 2 * *", "", "expected exactly 5 fields"},
		{"61 * * * *", "", "end of range (61) above maximum (59)"},
		{"@fortnightly", "", "unrecognized descriptor"},
		{"0 2 * * *", "Mars/Olympus", `unknown time zone "Mars/Olympus"`},
		{"CRON_TZ=Europe/Berlin 0 2 * * *", "Europe/Paris", "set only one"},
		{"@every 10s", "", "at most once a minute"},
		{"@every soon", "", "is not a duration"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.schedule, tt.tz)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q, %q) = %v, want an error containing %q", tt.schedule, tt.tz, err, tt.want)
		}
	}
	for _, ok := range []string{"@daily", "@every 6h", "TZ=Asia/Tokyo 0 3 * * 1-5", "*/15 * * * *"} {
		if err := Validate(ok, ""); err != nil {
			t.Errorf("Validate(%q) = %v", ok, err)
		}
	}
}

func TestManualDue(t *testing.T) {
	if !ManualDue("2026-12-03", "") || ManualDue("2026-12-03", "2026-12-03") || ManualDue("", "x") || !ManualDue("b", "a") {
		t.Error("ManualDue: a run is due once per new non-empty token")
	}
}

func TestRequeueAfter(t *testing.T) {
	now := at("2026-12-03T10:00:00Z")
	if got := RequeueAfter(Decision{Next: now.Add(time.Hour)}, now); got != time.Hour {
		t.Errorf("RequeueAfter = %s", got)
	}
	if got := RequeueAfter(Decision{Next: now}, now); got != time.Second {
		t.Errorf("a tick now must not spin: %s", got)
	}
}

func BenchmarkDecideYearOfDowntime(b *testing.B) {
	s, _ := Parse("* * * * *", "")
	in := Input{Schedule: s, Created: at("2025-12-03T00:00:00Z"), Now: at("2026-12-03T00:00:30Z")}
	for b.Loop() {
		Decide(in)
	}
}
