package schedule

import (
	"time"

	"github.com/robfig/cron/v3"
)

// dueTicks returns the latest tick t with after < t <= now and how many there are. It walks at
// most MaxCounted ticks; when there are more it reports MaxCounted+1 and capped, and finds the
// latest by searching back from now (lastTick) instead of walking on.
func dueTicks(s cron.Schedule, after, now time.Time) (latest time.Time, n int, capped bool) {
	if c, ok := s.(cron.ConstantDelaySchedule); ok && c.Delay >= time.Second {
		return dueEvery(c, after, now)
	}
	for t := s.Next(after); due(t, latest, now); t = s.Next(t) {
		if n == MaxCounted {
			return lastTick(s, latest, now), n + 1, true
		}
		latest, n = t, n+1
	}
	return latest, n, false
}

// due reports whether t, the tick after prev, is due at now. A zero or non-advancing t
// (robfig/cron found nothing, or a broken schedule) ends the walk rather than looping.
func due(t, prev, now time.Time) bool {
	return !t.IsZero() && t.After(prev) && !t.After(now)
}

// dueEvery counts the ticks of an @every schedule by division: they are evenly spaced, so even
// a year of once-a-minute ticks is counted exactly, in constant time.
func dueEvery(c cron.ConstantDelaySchedule, after, now time.Time) (latest time.Time, n int, capped bool) {
	first := c.Next(after)
	if first.After(now) {
		return time.Time{}, 0, false
	}
	k := now.Sub(first) / c.Delay
	return first.Add(k * c.Delay), int(k) + 1, false
}

// nextTick is the first tick after now. @every ticks are a grid anchored at after (Created or
// the last handled tick), so they are counted from there: Next(now) would be now + period and
// drift with every reconcile.
func nextTick(s cron.Schedule, after, now time.Time) time.Time {
	c, ok := s.(cron.ConstantDelaySchedule)
	if !ok || c.Delay < time.Second {
		return s.Next(now)
	}
	first := c.Next(after)
	if first.After(now) {
		return first
	}
	return first.Add((now.Sub(first)/c.Delay + 1) * c.Delay)
}

// maxLookBack bounds lastTick's doubling: any schedule Parse accepts ticks at least every few
// years, and doubling a Duration much further would overflow it.
const maxLookBack = 100 * 365 * 24 * time.Hour

// lastTick returns the latest tick in (after, now], or after when there is none. It looks back
// from now over a window that doubles until it holds a tick, then walks that window. The newer
// half of the window was the previous round and held no tick, so the walk covers at most the
// older half: a few ticks, or one cluster such as the minutes of "* 3 * * *".
func lastTick(s cron.Schedule, after, now time.Time) time.Time {
	gap := now.Sub(after)
	for back := time.Minute; ; back *= 2 {
		from := now.Add(-back)
		if back >= gap || back >= maxLookBack {
			from = after
		}
		latest := after
		for t := s.Next(from); due(t, latest, now); t = s.Next(t) {
			latest = t
		}
		if latest.After(after) || from.Equal(after) {
			return latest
		}
	}
}
