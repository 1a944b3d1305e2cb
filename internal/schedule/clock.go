package schedule

import "time"

// Clock tells the time. The controller injects it (RealClock in production) so that tests can
// move time by hand instead of sleeping.
type Clock interface {
	Now() time.Time
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }
