package schedule

import (
	"time"

	"github.com/robfig/cron/v3"
)

// MaxCounted caps how many due ticks Decide counts one by one. After long downtime a
// once-a-minute schedule has 525,600 ticks a year; walking them all (robfig/cron's Next costs
// about a microsecond) would stall a reconcile for up to a second, and the number matters only as
// a counter in status. Past the cap Decide stops counting (Missed or Skipped is then
// MaxCounted + 1, a lower bound) and finds the latest tick by searching back from Now.
// @every schedules are counted exactly (by division), whatever the downtime.
const MaxCounted = 10000

// Input is everything Decide looks at: the schedule, the object's status and the time.
type Input struct {
	// Schedule is what Parse returned.
	Schedule cron.Schedule
	// Created is the object's creation time: the first window starts here, so a new object
	// does not run for a tick before it existed.
	Created time.Time
	// LastScheduled is the latest tick already handled (status.lastScheduleTime): the
	// Decision.Handled of an earlier reconcile. nil before the first.
	LastScheduled *time.Time
	// Now is the controller's clock.
	Now time.Time
	// StartingDeadline: a tick that cannot start within this long of its time is missed rather
	// than run late. nil = no deadline.
	StartingDeadline *time.Duration
	// Running is true while a run is in progress.
	Running bool
	// Suspended is spec.suspend.
	Suspended bool
}

// Decision is what the controller does now.
type Decision struct {
	// Run is the scheduled time to start a run for now; nil when none.
	Run *time.Time
	// Handled is the latest due tick, which this decision disposes of (run, missed, skipped or
	// dropped while suspended): the controller stores it as status.lastScheduleTime so that no
	// tick is counted or run twice. nil when no tick is due: keep the old value.
	Handled *time.Time
	// Missed counts ticks that will never run: all but the latest after downtime, and the
	// latest too when it is past StartingDeadline.
	Missed int
	// Skipped counts ticks that came while a run was still going.
	Skipped int
	// Next is the first tick after Now, for status.nextBackup and RequeueAfter; zero if the
	// schedule has none in the next five years (robfig/cron's horizon). For @every it is on the
	// grid that starts at Created or LastScheduled, not Now + period.
	Next time.Time
}

// Decide decides, from Input alone, whether to start a run now. Its semantics are those of a
// Kubernetes CronJob with concurrencyPolicy Forbid, minus that controller's known pitfalls:
//
//   - The due ticks are every t with max(LastScheduled, Created) < t <= Now.
//   - Only the latest due tick may run: however long the operator was down there is at most one
//     catch-up run, and the earlier ticks count as Missed. (A CronJob gives up entirely after
//     100 missed ticks; here counting is capped, scheduling never stops.)
//   - With StartingDeadline set and Now - latest > StartingDeadline, the latest is Missed too.
//   - While a run is going, due ticks are Skipped (not Missed: nothing failed, they overlapped).
//   - While Suspended, due ticks are neither run nor counted, but they are Handled: suspension is
//     the user's intent, not a failure, and resuming must not start a run for a tick that came
//     while suspended nor count the suspended ticks as missed. (A CronJob does both.)
//
// Decide never returns the same tick twice as long as the controller stores Handled.
func Decide(in Input) Decision {
	after := in.Created
	if in.LastScheduled != nil && in.LastScheduled.After(after) {
		after = *in.LastScheduled
	}
	d := Decision{Next: nextTick(in.Schedule, after, in.Now)}
	latest, n, _ := dueTicks(in.Schedule, after, in.Now)
	if n == 0 {
		return d
	}
	d.Handled = &latest
	switch {
	case in.Suspended:
		// Handled but neither run nor counted: see above.
	case in.Running:
		d.Skipped = n
	case in.StartingDeadline != nil && in.Now.Sub(latest) > *in.StartingDeadline:
		d.Missed = n
	default:
		d.Run, d.Missed = &latest, n-1
	}
	return d
}

// RequeueAfter is how long the controller waits before deciding again: until d.Next, at least a
// second so that a tick at Now cannot make it spin. With no next tick at all (robfig/cron found
// none within five years) it looks again in an hour instead of spinning on a zero time.
func RequeueAfter(d Decision, now time.Time) time.Duration {
	if d.Next.IsZero() {
		return time.Hour
	}
	return max(d.Next.Sub(now), time.Second)
}
