package engine

import (
	"context"
	"testing"
	"time"
)

// Whoever sees a run's context end on a stall must find HasStalled true at once: the kopia
// backup classifies the error of the call the stall ended by HasStalled, and CI once saw
// StorageFailed ("...: S3 stalled") because the watchdog ended the run's context before it
// marked the stall.
func TestAStallIsKnownAsSoonAsTheRunEnds(t *testing.T) {
	for i := range 300 {
		w := WatchRun(context.Background(), 4*time.Millisecond)
		done := w.Activity.Call()
		<-w.Ctx.Done()
		stalled := w.HasStalled()
		done(nil)
		w.Stop()
		if !stalled {
			t.Fatalf("round %d: the run's context ended (cause %v) before HasStalled knew of the stall", i, context.Cause(w.Ctx))
		}
	}
}
