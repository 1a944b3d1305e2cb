package schedule

import (
	"time"

	"github.com/robfig/cron/v3"
)

// allHours is the Hour mask of a schedule that fires in every hour of the day.
const allHours = 1<<24 - 1

// inZone puts a parsed schedule in loc and, when it has fixed hours, drops the ticks that
// daylight saving time repeats.
func inZone(s *cron.SpecSchedule, loc *time.Location) cron.Schedule {
	s.Location = loc
	if s.Hour&allHours == allHours {
		// Every hour: the repeated hour is just another hour of real time, and a "*/15 * * * *"
		// backup must keep its rhythm through it rather than pause for 75 minutes.
		return s
	}
	return dropRepeats{s}
}

// dropRepeats fixes what robfig/cron does on the day daylight saving time ends. The clock goes
// from 01:59 back to 01:00, so 01:30 happens twice, and robfig/cron fires "30 1 * * *" at both:
// a daily backup would run twice. Like Vixie cron for fixed-time jobs, a tick whose wall-clock
// time already ticked before the clock went back is dropped. Only schedules with fixed hours are
// wrapped (see inZone). Any backward shift of the zone's offset counts, not only one of an hour.
type dropRepeats struct {
	*cron.SpecSchedule
}

// Next returns the first tick after t that is not a repeat.
func (s dropRepeats) Next(t time.Time) time.Time {
	n := s.SpecSchedule.Next(t)
	for s.repeat(n) {
		n = s.SpecSchedule.Next(n)
	}
	return n
}

// repeat reports whether tick n lies in a wall-clock interval the zone went through a second time
// and its first occurrence was a tick too.
func (s dropRepeats) repeat(n time.Time) bool {
	if n.IsZero() {
		return false
	}
	local := n.In(s.Location)
	start, _ := local.ZoneBounds()
	if start.IsZero() {
		return false // no offset change before n: nothing repeats
	}
	_, before := start.Add(-time.Second).Zone()
	_, after := local.Zone()
	back := time.Duration(before-after) * time.Second
	if back <= 0 || !n.Before(start.Add(back)) {
		return false // clocks went forward, or n is past the repeated interval
	}
	first := n.Add(-back) // same wall clock, before the clocks went back
	return s.SpecSchedule.Next(first.Add(-time.Second)).Equal(first)
}
