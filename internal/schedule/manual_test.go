package schedule

import "testing"

func TestManualDue(t *testing.T) {
	tests := []struct {
		name, spec, handled string
		want                bool
	}{
		{"no token: nothing", "", "", false},
		{"new token: due", "2026-12-03T10:00", "", true},
		{"token already handled: not again", "2026-12-03T10:00", "2026-12-03T10:00", false},
		{"token changed: due again", "2026-12-04", "2026-12-03T10:00", true},
		{"token cleared: nothing", "", "2026-12-03T10:00", false},
		{"token back to an older value: due (it is new to the last handled)", "a", "b", true},
	}
	for _, tt := range tests {
		if got := ManualDue(tt.spec, tt.handled); got != tt.want {
			t.Errorf("%s: ManualDue(%q, %q) = %t, want %t", tt.name, tt.spec, tt.handled, got, tt.want)
		}
	}
}
