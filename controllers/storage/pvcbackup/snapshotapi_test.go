package pvcbackup

import (
	"context"
	"testing"
	"time"
)

// snapshotAPI asks the API server at most once per TTL while the API is absent, finds it once it
// is served, starts the watch once, and never asks again after that.
func TestSnapshotAPIIsAskedOncePerPollUntilServed(t *testing.T) {
	var a snapshotAPI
	served, asked, watches := false, 0, 0
	probe := func(context.Context) (bool, error) { asked++; return served, nil }
	watch := func() error { watches++; return nil }
	t0 := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	ttl := 30 * time.Second
	look := func(at time.Duration) bool { return a.isServed(context.Background(), t0.Add(at), ttl, probe, watch) }

	if look(0) || look(10*time.Second) || look(29*time.Second) {
		t.Fatal("served while the API is absent")
	}
	if asked != 1 {
		t.Errorf("asked %d times within one TTL, want 1", asked)
	}
	served = true // the CRDs are installed
	if look(20 * time.Second) {
		t.Error("found before the TTL passed: the answer is cached")
	}
	if !look(31*time.Second) || !look(32*time.Second) || !look(time.Hour) {
		t.Error("not found after the TTL")
	}
	if asked != 2 || watches != 1 {
		t.Errorf("asked %d times, %d watches started; want 2 and 1", asked, watches)
	}
	if (&snapshotAPI{}).isServed(context.Background(), t0, ttl, nil, watch) {
		t.Error("served without a probe")
	}
}
