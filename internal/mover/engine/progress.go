package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/okgoes/okgoes-operator/internal/mover"
)

// ProgressReporter writes the mover.Progress of a running backup to S3, at most once per
// interval, from its own goroutine: a slow S3 never slows the backup, and a failed write is only
// skipped.
type ProgressReporter struct {
	mu       sync.Mutex
	latest   *mover.Progress
	stopping atomic.Bool
	wake     chan struct{}
	done     chan struct{}
}

// NewProgressReporter starts the reporter of a backup writing at key (none when key is empty)
// every interval (mover.ProgressEvery when 0). It ends with ctx or Stop.
func NewProgressReporter(ctx context.Context, store interface {
	PutBytes(ctx context.Context, key string, data []byte, contentType string) error
}, key string, every time.Duration) *ProgressReporter {
	p := &ProgressReporter{wake: make(chan struct{}, 1), done: make(chan struct{})}
	if key == "" || store == nil {
		close(p.done)
		return p
	}
	if every <= 0 {
		every = mover.ProgressEvery
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
			case <-t.C:
			}
			p.mu.Lock()
			latest := p.latest
			p.latest = nil
			p.mu.Unlock()
			if latest != nil {
				data, _ := json.Marshal(latest)
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				if err := store.PutBytes(wctx, key, data, "application/json"); err != nil {
					fmt.Fprintln(os.Stderr, "mover: progress report:", err)
				}
				cancel()
			}
			if p.stopping.Load() {
				return
			}
		}
	}()
	return p
}

// Report keeps pr as the latest Progress; the goroutine writes it on its next turn.
func (p *ProgressReporter) Report(pr mover.Progress) {
	pr.Time = time.Now().UTC()
	p.mu.Lock()
	p.latest = &pr
	p.mu.Unlock()
}

// Stop ends the reporter once it has written what it holds.
func (p *ProgressReporter) Stop() {
	p.stopping.Store(true)
	select {
	case p.wake <- struct{}{}:
	default:
	}
	<-p.done
}

// KeepReporting feeds progress() to the reporter once a second, until the returned function is
// called: the report of a phase that reports nothing by itself (an archive upload, kopia's
// maintenance), so that its age keeps meaning "the mover is stuck or S3 takes no request".
func KeepReporting(reporter *ProgressReporter, progress func() mover.Progress) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				reporter.Report(progress())
				return
			case <-t.C:
				reporter.Report(progress())
			}
		}
	}()
	return func() { close(stop); <-done; reporter.Stop() }
}
