package schedule

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// fakeClock is the Clock tests move by hand.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

var (
	_ Clock = (*fakeClock)(nil)
	_ Clock = RealClock{}
)

// at parses an RFC 3339 time; "" is the zero time.
func at(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// show formats a time for comparison with at's input; nil and zero are "".
func show(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func ptr[T any](v T) *T { return &v }

func mustParse(t testing.TB, spec, zone string) cron.Schedule {
	t.Helper()
	s, err := Parse(spec, zone)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", spec, zone, err)
	}
	return s
}

// ticks lists the ticks of s in (from, to], in UTC.
func ticks(s cron.Schedule, from, to time.Time) []string {
	var out []string
	for t := s.Next(from); !t.IsZero() && !t.After(to); t = s.Next(t) {
		out = append(out, show(&t))
	}
	return out
}

// countingSchedule counts calls to Next, to prove Decide does not walk tick by tick.
type countingSchedule struct {
	cron.Schedule
	calls int
}

func (c *countingSchedule) Next(t time.Time) time.Time {
	c.calls++
	return c.Schedule.Next(t)
}
