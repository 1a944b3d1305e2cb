package schedule

import (
	"slices"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// TestRobfigDSTBehaviour pins what robfig/cron itself does, which Parse builds on: it fires a
// fixed-time job twice on the day the clocks go back (hence dropRepeats), and not at all on the
// day a job's time falls into the hour the clocks skip (kept, documented on Parse). If an
// upgrade changes either, this fails and the documentation must change with it.
func TestRobfigDSTBehaviour(t *testing.T) {
	tests := []struct {
		name, spec, from, to string
		want                 []string
	}{
		{"fall back: 01:30 fires at 01:30 EDT and again at 01:30 EST",
			"CRON_TZ=America/New_York 30 1 * * *", "2026-10-31T12:00:00Z", "2026-11-02T00:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z"}},
		{"spring forward: 02:30 does not exist on 8 March and does not fire",
			"CRON_TZ=America/New_York 30 2 * * *", "2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z",
			[]string{"2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z"}},
	}
	for _, tt := range tests {
		s, err := cron.ParseStandard(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := ticks(s, at(tt.from), at(tt.to)); !slices.Equal(got, tt.want) {
			t.Errorf("%s: robfig/cron ticks %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestDSTTicks checks Parse's ticks around daylight saving time changes.
func TestDSTTicks(t *testing.T) {
	tests := []struct {
		name, spec, zone, from, to string
		want                       []string
	}{
		// America/New_York ends DST on 1 November 2026: 01:00-01:59 happens as EDT (05:xxZ),
		// then again as EST (06:xxZ).
		{"fall back: a daily 01:30 job runs once, at its first occurrence",
			"30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"fall back: a job with several ticks in the repeated hour runs each once",
			"*/30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:00:00Z", "2026-11-02T06:30:00Z"}},
		{"fall back: only the repeated hour is dropped, 02:00 still runs",
			"0 1-2 * * *", "America/New_York", "2026-10-31T12:00:00Z", "2026-11-01T12:00:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z"}},
		{"fall back: an hourly job keeps running every real hour",
			"0 * * * *", "America/New_York", "2026-11-01T03:30:00Z", "2026-11-01T08:00:00Z",
			[]string{"2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"}},
		{"fall back: a 20-minute job keeps its rhythm through the repeated hour",
			"*/20 * * * *", "America/New_York", "2026-11-01T04:50:00Z", "2026-11-01T06:50:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T05:20:00Z", "2026-11-01T05:40:00Z",
				"2026-11-01T06:00:00Z", "2026-11-01T06:20:00Z", "2026-11-01T06:40:00Z"}},
		{"fall back in Berlin: 02:30 runs once (00:30Z CEST, not again at 01:30Z CET)",
			"30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"fall back by 30 minutes (Lord Howe): 01:45 repeats and runs once",
			"45 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z", "2026-04-06T00:00:00Z",
			[]string{"2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"}},
		{"fall back by 30 minutes (Lord Howe): 01:15 is not repeated",
			"15 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z", "2026-04-06T00:00:00Z",
			[]string{"2026-04-04T14:15:00Z", "2026-04-05T14:45:00Z"}},
		// America/New_York starts DST on 8 March 2026: 02:00-02:59 does not exist.
		{"spring forward: a daily 02:30 job does not run that day (robfig/cron)",
			"30 2 * * *", "America/New_York", "2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z",
			[]string{"2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z"}},
		{"spring forward: 01:30, before the gap, runs as usual",
			"30 1 * * *", "America/New_York", "2026-03-07T12:00:00Z", "2026-03-09T00:00:00Z",
			[]string{"2026-03-08T06:30:00Z"}},
		{"spring forward: an hourly job runs every real hour",
			"0 * * * *", "America/New_York", "2026-03-08T05:30:00Z", "2026-03-08T08:00:00Z",
			[]string{"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ticks(mustParse(t, tt.spec, tt.zone), at(tt.from), at(tt.to)); !slices.Equal(got, tt.want) {
				t.Errorf("ticks\n got: %v\nwant: %v", got, tt.want)
			}
		})
	}
}

// TestDSTNextFromInsideTheRepeatedHour asks for the next tick from every minute of the fall-back
// night: whatever the time of the reconcile, the repeat is never returned.
func TestDSTNextFromInsideTheRepeatedHour(t *testing.T) {
	s := mustParse(t, "30 1 * * *", "America/New_York")
	for now := at("2026-11-01T05:00:00Z"); now.Before(at("2026-11-01T07:00:00Z")); now = now.Add(time.Minute) {
		want := "2026-11-01T05:30:00Z"
		if !now.Before(at(want)) {
			want = "2026-11-02T06:30:00Z"
		}
		if next := s.Next(now); show(&next) != want {
			t.Fatalf("Next(%s) = %s, want %s", show(&now), show(&next), want)
		}
	}
}
