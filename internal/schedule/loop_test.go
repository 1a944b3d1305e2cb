package schedule

import (
	"slices"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// controller is the PVCBackup controller's use of this package, reduced to the status it keeps.
// It reconciles when RequeueAfter says, or when its run ends, and never otherwise.
type controller struct {
	sched   cron.Schedule
	created time.Time
	clock   *fakeClock
	runFor  time.Duration // how long a run takes

	// status
	last            *time.Time
	runEnd          time.Time
	runs            []string
	late            int // runs started after their scheduled time
	missed, skipped int
	reconciles      int
}

func (c *controller) reconcile() time.Duration {
	c.reconciles++
	now := c.clock.Now()
	d := Decide(Input{Schedule: c.sched, Created: c.created, LastScheduled: c.last, Now: now, Running: now.Before(c.runEnd)})
	if d.Handled != nil {
		c.last = d.Handled
	}
	c.missed += d.Missed
	c.skipped += d.Skipped
	wait := RequeueAfter(d, now)
	if d.Run != nil {
		c.runs = append(c.runs, show(d.Run))
		if !d.Run.Equal(now) {
			c.late++
		}
		c.runEnd = now.Add(c.runFor)
	}
	if now.Before(c.runEnd) {
		wait = min(wait, c.runEnd.Sub(now)) // the Job's completion wakes the controller
	}
	return wait
}

// runUntil reconciles until the clock reaches end.
func (c *controller) runUntil(end time.Time) {
	for c.clock.Now().Before(end) {
		c.clock.Advance(c.reconcile())
	}
}

func newController(t *testing.T, spec, zone, created string) *controller {
	return &controller{sched: mustParse(t, spec, zone), created: at(created), clock: &fakeClock{now: at(created)}, runFor: time.Minute}
}

func TestLoopRunsEveryTickOnceAndOnTime(t *testing.T) {
	c := newController(t, "30 1 * * *", "America/New_York", "2026-10-29T12:00:00Z")
	c.runUntil(at("2026-11-03T12:00:00Z"))
	want := []string{"2026-10-30T05:30:00Z", "2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z", "2026-11-03T06:30:00Z"}
	if !slices.Equal(c.runs, want) {
		t.Errorf("runs %v, want %v (one a day, including the fall-back day)", c.runs, want)
	}
	if c.late != 0 || c.missed != 0 || c.skipped != 0 {
		t.Errorf("late, missed, skipped = %d, %d, %d; want 0", c.late, c.missed, c.skipped)
	}
	if c.reconciles > 3*len(want)+2 {
		t.Errorf("%d reconciles for %d runs: the requeue does not wait for the tick", c.reconciles, len(want))
	}
}

func TestLoopRestartLosesNothingAndCatchesUpOnce(t *testing.T) {
	c := newController(t, "0 */6 * * *", "", "2026-12-01T01:00:00Z")
	c.runUntil(at("2026-12-02T01:00:00Z"))
	if n := len(c.runs); n != 4 {
		t.Fatalf("%d runs before the outage, want 4", n)
	}
	// The operator is down from 01:00 on the 2nd until 00:30 on the 4th: eight ticks pass.
	c.clock.now = at("2026-12-04T00:30:00Z")
	restarted := &controller{sched: c.sched, created: c.created, clock: c.clock, last: c.last, runFor: time.Minute}
	restarted.runUntil(at("2026-12-04T07:00:00Z"))
	if want := []string{"2026-12-04T00:00:00Z", "2026-12-04T06:00:00Z"}; !slices.Equal(restarted.runs, want) {
		t.Errorf("after the restart: runs %v, want %v (one catch-up, then on schedule)", restarted.runs, want)
	}
	if restarted.missed != 7 || restarted.late != 1 {
		t.Errorf("missed, late = %d, %d; want 7, 1", restarted.missed, restarted.late)
	}
}

func TestLoopLongRunsSkipOverlappingTicks(t *testing.T) {
	c := newController(t, "0 * * * *", "", "2026-12-01T00:30:00Z")
	c.runFor = 90 * time.Minute
	c.runUntil(at("2026-12-01T06:30:00Z"))
	if want := []string{"2026-12-01T01:00:00Z", "2026-12-01T03:00:00Z", "2026-12-01T05:00:00Z"}; !slices.Equal(c.runs, want) {
		t.Errorf("runs %v, want %v", c.runs, want)
	}
	if c.skipped != 3 || c.missed != 0 {
		t.Errorf("skipped, missed = %d, %d; want 3, 0", c.skipped, c.missed)
	}
}

func TestLoopEveryKeepsItsGrid(t *testing.T) {
	c := newController(t, "@every 90m", "", "2026-12-01T00:10:00Z")
	c.runUntil(at("2026-12-01T06:00:00Z"))
	want := []string{"2026-12-01T01:40:00Z", "2026-12-01T03:10:00Z", "2026-12-01T04:40:00Z"}
	if !slices.Equal(c.runs, want) || c.late != 0 {
		t.Errorf("runs %v (%d late), want %v on time", c.runs, c.late, want)
	}
}
