// Package schedule makes the PVCBackup controller's scheduling decisions: pure functions of the
// schedule, the object's status and the time. The controller keeps no in-memory cron; it asks
// Decide on every reconcile and waits with RequeueAfter, so restarts and leader changes lose
// nothing.
package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Clock tells the time. The controller injects RealClock; tests inject a clock they move.
type Clock interface{ Now() time.Time }

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// minPeriod is the shortest @every period accepted: a volume backup more often than once a
// minute is a mistake (and would overlap itself).
const minPeriod = time.Minute

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse parses a standard five-field cron expression or a descriptor (@hourly, @daily,
// @weekly, @monthly, @yearly, @annually, @midnight, @every <duration>), optionally prefixed with
// CRON_TZ=<zone> (or TZ=<zone>). timeZone, an IANA zone name, is the alternative to the prefix;
// giving both is an error. Without either the schedule is in UTC.
func Parse(schedule, timeZone string) (cron.Schedule, error) {
	spec := strings.TrimSpace(schedule)
	if strings.HasPrefix(spec, "CRON_TZ=") || strings.HasPrefix(spec, "TZ=") {
		if timeZone != "" {
			return nil, fmt.Errorf("schedule %q has a time zone prefix and timeZone is %q: set only one", schedule, timeZone)
		}
		zone, rest, _ := strings.Cut(spec, " ")
		_, timeZone, _ = strings.Cut(zone, "=")
		spec = strings.TrimSpace(rest)
	}
	loc := time.UTC
	if timeZone != "" {
		l, err := time.LoadLocation(timeZone)
		if err != nil {
			return nil, fmt.Errorf("unknown time zone %q", timeZone)
		}
		loc = l
	}
	if p, ok := strings.CutPrefix(spec, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %q is not a duration such as 6h or 90m", schedule, p)
		}
		if d < minPeriod {
			return nil, fmt.Errorf("schedule %q: backups at most once a minute (got every %s)", schedule, d)
		}
		return cron.Every(d), nil
	}
	sched, err := parser.Parse("CRON_TZ=" + loc.String() + " " + spec)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %v", schedule, err)
	}
	return onceADay{Schedule: sched, loc: loc}, nil
}

// onceADay removes the second of two ticks with the same wall-clock time: on the day daylight
// saving time ends, robfig/cron yields a 01:30 schedule at 01:30 summer time and again an hour
// later at 01:30 winter time, which would back a volume up twice. (On the day it starts, a time
// inside the skipped hour does not exist and robfig/cron has no tick: such a schedule skips that
// day. Schedule backups outside 02:00-03:00 local time to avoid both.)
type onceADay struct {
	cron.Schedule
	loc *time.Location
}

func (s onceADay) Next(t time.Time) time.Time {
	n := s.Schedule.Next(t)
	prev := n.Add(-time.Hour)
	if sameWallClock(prev.In(s.loc), n.In(s.loc)) && s.Schedule.Next(prev.Add(-time.Second)).Equal(prev) {
		return s.Schedule.Next(n)
	}
	return n
}

func sameWallClock(a, b time.Time) bool {
	const wall = "2006-01-02 15:04:05"
	return a.Format(wall) == b.Format(wall)
}

// Validate reports whether Parse accepts the schedule.
func Validate(schedule, timeZone string) error {
	_, err := Parse(schedule, timeZone)
	return err
}

// Input is everything Decide looks at.
type Input struct {
	Schedule cron.Schedule
	// Created is the creation time of the object: the first window starts there.
	Created time.Time
	// LastScheduled is the latest scheduled time already handled (run, missed or skipped).
	LastScheduled *time.Time
	Now           time.Time
	// StartingDeadline: a tick older than this when it could start is missed. nil = no deadline.
	StartingDeadline *time.Duration
	// Running is true while a run is in progress.
	Running bool
	// Suspended is spec.suspend.
	Suspended bool
}

// Decision is what to do now.
type Decision struct {
	// Run is the scheduled time to start a run for now; nil when none.
	Run *time.Time
	// Handled is the latest tick this decision disposes of (ran, missed or skipped): the new
	// LastScheduled. nil when no tick is due.
	Handled *time.Time
	// Missed counts ticks that will never run: all but the latest after downtime, and the latest
	// too when it is past the starting deadline.
	Missed int
	// Skipped counts ticks that came while a run was still going.
	Skipped int
	// Next is the first tick after Now.
	Next time.Time
}

// maxCounted caps the tick count after very long downtime. A once-a-minute schedule that was
// stopped for a year has 525,600 missed ticks; counting them one by one would cost a reconcile
// seconds. Past the cap, Missed is reported as the cap and the latest tick is found by jumping.
const maxCounted = 10000

// Decide says what to do now (see Decision), like a CronJob with concurrencyPolicy Forbid but
// with at most one catch-up run however long the downtime, and without counting any tick twice:
// the caller stores Decision.Handled as the next LastScheduled.
//
// While Suspended, due ticks are neither run nor counted and stay unhandled: suspension is
// intent, not a failure, and resuming does not start a flood of runs (still at most one).
func Decide(in Input) Decision {
	d := Decision{Next: in.Schedule.Next(in.Now)}
	if in.Suspended {
		return d
	}
	from := in.Created
	if in.LastScheduled != nil && in.LastScheduled.After(from) {
		from = *in.LastScheduled
	}
	latest, count := dueTicks(in.Schedule, from, in.Now)
	if count == 0 {
		return d
	}
	d.Handled = &latest
	switch {
	case in.Running:
		d.Skipped = count
	case in.StartingDeadline != nil && in.Now.Sub(latest) > *in.StartingDeadline:
		d.Missed = count
	default:
		d.Missed = count - 1
		d.Run = &latest
	}
	return d
}

// dueTicks returns the latest tick t with from < t <= now and how many there are (capped).
func dueTicks(s cron.Schedule, from, now time.Time) (latest time.Time, count int) {
	for t := s.Next(from); !t.After(now); t = s.Next(t) {
		latest, count = t, count+1
		if count == maxCounted {
			// Jump: look back from now in growing steps for the last tick, instead of walking.
			for step := time.Minute; ; step *= 2 {
				start := now.Add(-step)
				if !start.After(t) {
					start = t
				}
				if n := s.Next(start); !n.After(now) {
					for ; !n.After(now); n = s.Next(n) {
						latest = n
					}
					return latest, count
				}
				if start.Equal(t) {
					return latest, count
				}
			}
		}
	}
	return latest, count
}

// RequeueAfter is how long to wait before the next decision: until the next tick, at least a
// second (a tick exactly now must not spin).
func RequeueAfter(d Decision, now time.Time) time.Duration {
	return max(d.Next.Sub(now), time.Second)
}

// ManualDue reports whether trigger.manual asks for a run: once per new, non-empty token.
func ManualDue(specToken, lastHandled string) bool {
	return specToken != "" && specToken != lastHandled
}
