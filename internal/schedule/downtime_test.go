package schedule

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

func TestDecideAfterHugeDowntime(t *testing.T) {
	yearAgo, now := at("2025-12-03T00:00:00Z"), at("2026-12-03T00:00:30Z")
	tests := []struct {
		name         string
		spec, zone   string
		created, now time.Time
		deadline     *time.Duration
		running      bool
		wantRun      string
		wantHandled  string
		wantMissed   int
		wantSkipped  int
		maxNextCalls int
	}{
		{name: "every minute for a year: one run, counting capped", spec: "* * * * *", created: yearAgo, now: now,
			wantRun: "2026-12-03T00:00:00Z", wantHandled: "2026-12-03T00:00:00Z", wantMissed: MaxCounted,
			maxNextCalls: MaxCounted + 100},
		{name: "every minute for a year, past the deadline", spec: "* * * * *", created: yearAgo, now: now, deadline: ptr(10 * time.Second),
			wantHandled: "2026-12-03T00:00:00Z", wantMissed: MaxCounted + 1, maxNextCalls: MaxCounted + 100},
		{name: "every minute for a year, a run going", spec: "* * * * *", created: yearAgo, now: now, running: true,
			wantHandled: "2026-12-03T00:00:00Z", wantSkipped: MaxCounted + 1, maxNextCalls: MaxCounted + 100},
		{name: "@every 1m for a year: counted exactly", spec: "@every 1m", created: yearAgo, now: now,
			wantRun: "2026-12-03T00:00:00Z", wantHandled: "2026-12-03T00:00:00Z", wantMissed: 365*24*60 - 1, maxNextCalls: 3},
		{name: "hourly for a year: under the cap, exact", spec: "0 * * * *", created: yearAgo, now: now,
			wantRun: "2026-12-03T00:00:00Z", wantHandled: "2026-12-03T00:00:00Z", wantMissed: 365*24 - 1, maxNextCalls: 365*24 + 2},
		{name: "exactly MaxCounted ticks: not capped", spec: "* * * * *", created: now.Add(-MaxCounted * time.Minute), now: now,
			wantRun: "2026-12-03T00:00:00Z", wantHandled: "2026-12-03T00:00:00Z", wantMissed: MaxCounted - 1, maxNextCalls: MaxCounted + 2},
		{name: "MaxCounted+1 ticks: capped", spec: "* * * * *", created: now.Add(-(MaxCounted + 1) * time.Minute), now: now,
			wantRun: "2026-12-03T00:00:00Z", wantHandled: "2026-12-03T00:00:00Z", wantMissed: MaxCounted,
			maxNextCalls: MaxCounted + 100},
		{name: "every minute of one hour a day, stopped in that hour", spec: "* 3 * * *", zone: "Europe/Berlin", created: yearAgo,
			now: at("2026-12-03T02:30:30Z"), wantRun: "2026-12-03T02:30:00Z", wantHandled: "2026-12-03T02:30:00Z",
			wantMissed: MaxCounted, maxNextCalls: MaxCounted + 200},
		{name: "no creation time: still fast", spec: "0 * * * *", created: time.Time{}, now: now,
			wantRun: "2026-12-03T00:00:00Z", wantHandled: "2026-12-03T00:00:00Z", wantMissed: MaxCounted,
			maxNextCalls: MaxCounted + 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &countingSchedule{Schedule: mustParse(t, tt.spec, tt.zone)}
			var in Input
			if ev, ok := s.Schedule.(cron.ConstantDelaySchedule); ok {
				in.Schedule = ev // Decide must see the concrete type to divide; count its one Next
				s.calls = 1
			} else {
				in.Schedule = s
			}
			in.Created, in.Now, in.StartingDeadline, in.Running = tt.created, tt.now, tt.deadline, tt.running
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
			if s.calls > tt.maxNextCalls {
				t.Errorf("%d calls to Next, want at most %d: Decide walks tick by tick", s.calls, tt.maxNextCalls)
			}
		})
	}
}

// TestLastTickMatchesAWalk compares the look-back search with walking the ticks. The walk
// starts at most maxGap (longer than any gap between two ticks of the schedule) before now, so
// that it is a cheap but exact oracle.
func TestLastTickMatchesAWalk(t *testing.T) {
	const day = 24 * time.Hour
	rng := rand.New(rand.NewPCG(1, 2))
	base := at("2026-01-01T00:00:00Z")
	for _, tt := range []struct {
		spec   string
		maxGap time.Duration
	}{
		{"* 3 * * *", 2 * day},
		{"*/7 9-17 * * 1-5", 4 * day},
		{"0 0 1 */3 *", 93 * day},
		{"30 1 * * *", 2 * day},
		{"0 0 29 2 *", 5 * 366 * day},
		{"*/5 * * * *", time.Hour},
	} {
		s := mustParse(t, tt.spec, "America/New_York")
		for range 300 {
			after := base.Add(time.Duration(rng.Int64N(int64(3 * 365 * day))))
			// Gaps from minutes to years, evenly spread over their orders of magnitude.
			now := after.Add(time.Duration(rng.Int64N(int64(time.Minute) << rng.IntN(21))))
			want := after
			from := now.Add(-tt.maxGap)
			if from.Before(after) {
				from = after
			}
			for t := s.Next(from); !t.After(now); t = s.Next(t) {
				want = t
			}
			if got := lastTick(s, after, now); !got.Equal(want) {
				t.Fatalf("%q: lastTick(%s, %s) = %s, want %s", tt.spec, show(&after), show(&now), show(&got), show(&want))
			}
		}
	}
}

func BenchmarkDecideYearOfDowntime(b *testing.B) {
	created, now := at("2025-12-03T00:00:00Z"), at("2026-12-03T00:00:30Z")
	for _, bb := range []struct{ name, spec, zone string }{
		{"every-minute", "* * * * *", ""},
		{"every-5-minutes-fixed-hours-Berlin", "*/5 1-23 * * *", "Europe/Berlin"},
		{"at-every-1m", "@every 1m", ""},
	} {
		b.Run(bb.name, func(b *testing.B) {
			in := Input{Schedule: mustParse(b, bb.spec, bb.zone), Created: created, Now: now}
			for b.Loop() {
				Decide(in)
			}
		})
	}
}
