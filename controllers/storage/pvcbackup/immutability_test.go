package pvcbackup

import (
	"testing"
	"time"

	"github.com/okgoes/okgoes-operator/internal/schedule"
)

// A lock of days is kept only by backups at most days-1 days apart (lockLapse): the widest gap of
// the schedule decides, DST and month lengths included.
func TestLockLapse(t *testing.T) {
	now := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		schedule string
		days     int32
		lapses   bool
	}{
		{"0 * * * *", 2, false},
		{"0 2 * * *", 2, false},
		{"0 2 * * 0", 7, true},  // weekly: 7 days apart, a 7-day lock lapses
		{"0 2 * * 0", 8, false}, // 8 days: backups 7 days apart keep it
		{"0 2 1 * *", 30, true}, // monthly: 31 days at most
		{"0 2 1 * *", 32, false},
		{"0 2 * * 1-5", 4, false}, // weekdays: 3 days over the weekend
		{"0 2 * * 1-5", 3, true},
	} {
		sched, err := schedule.Parse(tt.schedule, "UTC")
		if err != nil {
			t.Fatal(err)
		}
		gap, lapses := lockLapse(sched, now, tt.days)
		if lapses != tt.lapses {
			t.Errorf("%q with a %d-day lock: widest gap %v, lapses %v, want %v", tt.schedule, tt.days, gap, lapses, tt.lapses)
		}
	}
}
