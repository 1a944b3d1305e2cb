package schedule

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	const hourly = "0 * * * *"
	tests := []struct {
		name      string
		spec      string
		zone      string
		created   string
		last      string
		now       string
		deadline  *time.Duration
		running   bool
		suspended bool

		wantRun     string
		wantHandled string
		wantMissed  int
		wantSkipped int
		wantNext    string
	}{
		{name: "normal tick: just before it", spec: hourly, created: "2026-12-01T00:00:00Z",
			last: "2026-12-03T10:00:00Z", now: "2026-12-03T10:59:59Z",
			wantNext: "2026-12-03T11:00:00Z"},
		{name: "normal tick: exactly at it", spec: hourly, created: "2026-12-01T00:00:00Z",
			last: "2026-12-03T10:00:00Z", now: "2026-12-03T11:00:00Z",
			wantRun: "2026-12-03T11:00:00Z", wantHandled: "2026-12-03T11:00:00Z", wantNext: "2026-12-03T12:00:00Z"},
		{name: "normal tick: late, no deadline: runs", spec: hourly, created: "2026-12-01T00:00:00Z",
			last: "2026-12-03T10:00:00Z", now: "2026-12-03T11:42:00Z",
			wantRun: "2026-12-03T11:00:00Z", wantHandled: "2026-12-03T11:00:00Z", wantNext: "2026-12-03T12:00:00Z"},
		{name: "tick already handled", spec: hourly, created: "2026-12-01T00:00:00Z",
			last: "2026-12-03T11:00:00Z", now: "2026-12-03T11:30:00Z",
			wantNext: "2026-12-03T12:00:00Z"},
		{name: "first run: nothing before the first tick after creation", spec: hourly,
			created: "2026-12-03T10:20:00Z", now: "2026-12-03T10:59:59Z",
			wantNext: "2026-12-03T11:00:00Z"},
		{name: "first run: a tick at the creation instant is not due", spec: hourly,
			created: "2026-12-03T11:00:00Z", now: "2026-12-03T11:00:00Z",
			wantNext: "2026-12-03T12:00:00Z"},
		{name: "first run: the first tick after creation runs", spec: hourly,
			created: "2026-12-03T10:20:00Z", now: "2026-12-03T11:00:00Z",
			wantRun: "2026-12-03T11:00:00Z", wantHandled: "2026-12-03T11:00:00Z", wantNext: "2026-12-03T12:00:00Z"},
		{name: "downtime: one catch-up for the latest tick, the rest missed", spec: hourly,
			created: "2026-12-01T00:00:00Z", last: "2026-12-03T01:00:00Z", now: "2026-12-03T06:10:00Z",
			wantRun: "2026-12-03T06:00:00Z", wantHandled: "2026-12-03T06:00:00Z", wantMissed: 4, wantNext: "2026-12-03T07:00:00Z"},
		{name: "downtime from creation, never run", spec: "0 2 * * *",
			created: "2026-12-01T12:00:00Z", now: "2026-12-08T03:00:00Z",
			wantRun: "2026-12-08T02:00:00Z", wantHandled: "2026-12-08T02:00:00Z", wantMissed: 6, wantNext: "2026-12-09T02:00:00Z"},
		{name: "deadline exceeded: no run, all missed", spec: hourly, deadline: ptr(5 * time.Minute),
			created: "2026-12-01T00:00:00Z", last: "2026-12-03T01:00:00Z", now: "2026-12-03T06:10:00Z",
			wantHandled: "2026-12-03T06:00:00Z", wantMissed: 5, wantNext: "2026-12-03T07:00:00Z"},
		{name: "deadline not exceeded: runs late", spec: hourly, deadline: ptr(5 * time.Minute),
			created: "2026-12-01T00:00:00Z", last: "2026-12-03T05:00:00Z", now: "2026-12-03T06:04:00Z",
			wantRun: "2026-12-03T06:00:00Z", wantHandled: "2026-12-03T06:00:00Z", wantNext: "2026-12-03T07:00:00Z"},
		{name: "deadline reached exactly: still runs", spec: hourly, deadline: ptr(5 * time.Minute),
			created: "2026-12-01T00:00:00Z", last: "2026-12-03T05:00:00Z", now: "2026-12-03T06:05:00Z",
			wantRun: "2026-12-03T06:00:00Z", wantHandled: "2026-12-03T06:00:00Z", wantNext: "2026-12-03T07:00:00Z"},
		{name: "deadline zero: only on time", spec: hourly, deadline: ptr(time.Duration(0)),
			created: "2026-12-01T00:00:00Z", last: "2026-12-03T05:00:00Z", now: "2026-12-03T06:00:01Z",
			wantHandled: "2026-12-03T06:00:00Z", wantMissed: 1, wantNext: "2026-12-03T07:00:00Z"},
		{name: "overlap: skipped, not missed, no run", spec: hourly, running: true,
			created: "2026-12-01T00:00:00Z", last: "2026-12-03T05:00:00Z", now: "2026-12-03T06:04:00Z",
			wantHandled: "2026-12-03T06:00:00Z", wantSkipped: 1, wantNext: "2026-12-03T07:00:00Z"},
		{name: "overlap for hours: all skipped", spec: hourly, running: true, deadline: ptr(time.Minute),
			created: "2026-12-01T00:00:00Z", last: "2026-12-03T01:00:00Z", now: "2026-12-03T06:10:00Z",
			wantHandled: "2026-12-03T06:00:00Z", wantSkipped: 5, wantNext: "2026-12-03T07:00:00Z"},
		{name: "overlap, nothing due: nothing counted", spec: hourly, running: true,
			created: "2026-12-01T00:00:00Z", last: "2026-12-03T06:00:00Z", now: "2026-12-03T06:30:00Z",
			wantNext: "2026-12-03T07:00:00Z"},
		{name: "suspended: no run, nothing counted, ticks handled, next computed", spec: hourly, suspended: true,
			created: "2026-12-01T00:00:00Z", last: "2026-12-03T05:00:00Z", now: "2026-12-03T08:04:00Z",
			wantHandled: "2026-12-03T08:00:00Z", wantNext: "2026-12-03T09:00:00Z"},
		{name: "suspended while running: nothing counted", spec: hourly, suspended: true, running: true,
			created: "2026-12-01T00:00:00Z", last: "2026-12-03T05:00:00Z", now: "2026-12-03T06:04:00Z",
			wantHandled: "2026-12-03T06:00:00Z", wantNext: "2026-12-03T07:00:00Z"},
		{name: "suspended, nothing due", spec: hourly, suspended: true,
			created: "2026-12-01T00:00:00Z", last: "2026-12-03T06:00:00Z", now: "2026-12-03T06:04:00Z",
			wantNext: "2026-12-03T07:00:00Z"},
		{name: "last scheduled before creation (recreated object): creation wins", spec: hourly,
			created: "2026-12-03T05:30:00Z", last: "2026-12-01T00:00:00Z", now: "2026-12-03T06:04:00Z",
			wantRun: "2026-12-03T06:00:00Z", wantHandled: "2026-12-03T06:00:00Z", wantNext: "2026-12-03T07:00:00Z"},
		{name: "last scheduled ahead of the clock (skew between leaders): nothing runs twice", spec: hourly,
			created: "2026-12-01T00:00:00Z", last: "2026-12-03T07:00:00Z", now: "2026-12-03T06:59:58Z",
			wantNext: "2026-12-03T07:00:00Z"},
		{name: "@every counts from creation", spec: "@every 90m",
			created: "2026-12-03T10:20:00Z", now: "2026-12-03T13:25:00Z",
			wantRun: "2026-12-03T13:20:00Z", wantHandled: "2026-12-03T13:20:00Z", wantMissed: 1, wantNext: "2026-12-03T14:50:00Z"},
		{name: "@every counts from the last tick", spec: "@every 90m",
			created: "2026-12-01T00:00:00Z", last: "2026-12-03T13:20:00Z", now: "2026-12-03T14:49:59Z",
			wantNext: "2026-12-03T14:50:00Z"},
		{name: "time zone: 02:00 Berlin runs at 01:00 UTC in winter", spec: "0 2 * * *", zone: "Europe/Berlin",
			created: "2026-12-01T00:00:00Z", last: "2026-12-02T01:00:00Z", now: "2026-12-03T01:00:00Z",
			wantRun: "2026-12-03T01:00:00Z", wantHandled: "2026-12-03T01:00:00Z", wantNext: "2026-12-04T01:00:00Z"},
		{name: "time zone: CRON_TZ=Europe/Berlin 02:00 runs at 00:00 UTC in summer", spec: "CRON_TZ=Europe/Berlin 0 2 * * *",
			created: "2026-07-01T00:00:00Z", last: "2026-07-01T00:00:00Z", now: "2026-07-02T00:00:00Z",
			wantRun: "2026-07-02T00:00:00Z", wantHandled: "2026-07-02T00:00:00Z", wantNext: "2026-07-03T00:00:00Z"},
		{name: "DST fall back: a 01:30 New York job runs once on the repeated hour", spec: "30 1 * * *", zone: "America/New_York",
			created: "2026-10-01T00:00:00Z", last: "2026-11-01T05:30:00Z", now: "2026-11-01T06:45:00Z",
			wantNext: "2026-11-02T06:30:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Schedule: mustParse(t, tt.spec, tt.zone), Created: at(tt.created), Now: at(tt.now),
				StartingDeadline: tt.deadline, Running: tt.running, Suspended: tt.suspended}
			if tt.last != "" {
				in.LastScheduled = ptr(at(tt.last))
			}
			d := Decide(in)
			if got := show(d.Run); got != tt.wantRun {
				t.Errorf("Run = %q, want %q", got, tt.wantRun)
			}
			if got := show(d.Handled); got != tt.wantHandled {
				t.Errorf("Handled = %q, want %q", got, tt.wantHandled)
			}
			if d.Missed != tt.wantMissed || d.Skipped != tt.wantSkipped {
				t.Errorf("Missed, Skipped = %d, %d; want %d, %d", d.Missed, d.Skipped, tt.wantMissed, tt.wantSkipped)
			}
			if got := show(&d.Next); got != tt.wantNext {
				t.Errorf("Next = %q, want %q", got, tt.wantNext)
			}
		})
	}
}

func TestRequeueAfter(t *testing.T) {
	now := at("2026-12-03T10:00:00Z")
	tests := []struct {
		name string
		next time.Time
		want time.Duration
	}{
		{"until the next tick", now.Add(90 * time.Minute), 90 * time.Minute},
		{"a tick now does not spin", now, time.Second},
		{"a tick in the past does not spin", now.Add(-time.Minute), time.Second},
		{"sub-second waits are rounded up to the minimum", now.Add(time.Millisecond), time.Second},
		{"no next tick: look again in an hour", time.Time{}, time.Hour},
	}
	for _, tt := range tests {
		if got := RequeueAfter(Decision{Next: tt.next}, now); got != tt.want {
			t.Errorf("%s: RequeueAfter = %s, want %s", tt.name, got, tt.want)
		}
	}
}
