package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// ErrStalled is the cause of a context the idle watchdog cancelled.
var ErrStalled = errors.New("S3 stalled")

// Activity is the idle watchdog of a run. It watches the S3 calls in flight (Call, Do): S3 is
// stalled when a call is in flight and nothing moved for the idle timeout. What moves: the
// archive engine touches it for every byte sent to S3; kopia talks to S3 itself, so for it the
// mover watches the progress kopia reports and every S3 call of the repository that succeeds.
// Work without an S3 call in flight (reading the volume, hashing) is never a stall.
type Activity struct {
	last     atomic.Int64 // unix nanoseconds of the last change
	count    atomic.Int64
	inFlight atomic.Int64 // S3 calls
}

// WatchActivity calls onStall, once, when an S3 call was in flight and Touch saw no change for
// idle. It stops when ctx ends.
func WatchActivity(ctx context.Context, idle time.Duration, onStall func()) *Activity {
	a := &Activity{}
	a.last.Store(time.Now().UnixNano())
	tick := min(idle/4, time.Second)
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if a.inFlight.Load() > 0 && time.Since(time.Unix(0, a.last.Load())) > idle {
					onStall()
					return
				}
			}
		}
	}()
	return a
}

// Call records an S3 call in flight until the returned function is called with its error; one
// that succeeded is progress.
func (a *Activity) Call() func(error) {
	if a.inFlight.Add(1) == 1 {
		a.Touch(-1) // the idle time counts from the first call in flight
	}
	return func(err error) {
		if err == nil {
			a.Touch(-1)
		}
		a.inFlight.Add(-1)
	}
}

// Do runs the S3 call f as a call in flight.
func (a *Activity) Do(f func() error) error {
	done := a.Call()
	err := f()
	done(err)
	return err
}

// Touch records progress: a total that changed since the last call, or -1 (a new phase).
func (a *Activity) Touch(total int64) {
	if total < 0 || a.count.Swap(total) != total {
		a.last.Store(time.Now().UnixNano())
	}
}

// Watch is a run under the idle watchdog: when an S3 request (a read of the archive, a kopia
// repository's call) has made no progress for the idle timeout, the run's context ends, and with
// it (through Stalled) every S3 call of a kopia repository, whatever context kopia gave it.
// Without it a restore from a frozen S3 server waited for the Job's deadline (6 hours by default).
type Watch struct {
	Ctx      context.Context // the run's: ends on a stall too
	Idle     time.Duration
	Activity *Activity
	Stalled  context.Context // ends, with ErrStalled, on a stall only
	Stop     func()          // ends the watchdog; call it once the run's S3 calls are over
}

// WatchRun starts the watchdog of a run under ctx that gives up after idle (mover's
// DefaultIdleTimeout when 0).
func WatchRun(ctx context.Context, idle time.Duration) *Watch {
	if idle <= 0 {
		idle = mover.DefaultIdleTimeout
	}
	w := &Watch{Idle: idle}
	watching, stopWatching := context.WithCancel(context.WithoutCancel(ctx))
	stalled, stall := context.WithCancelCause(context.WithoutCancel(ctx))
	rctx, cancel := context.WithCancelCause(ctx)
	w.Ctx, w.Stalled = rctx, stalled
	// Stalled ends first: whoever sees the run's context end on a stall finds HasStalled true.
	w.Activity = WatchActivity(watching, idle, func() { stall(ErrStalled); cancel(ErrStalled) })
	w.Stop = func() { stopWatching(); cancel(nil); stall(nil) }
	return w
}

// HasStalled reports whether the watchdog ended the run.
func (w *Watch) HasStalled() bool { return context.Cause(w.Stalled) == ErrStalled }

// Outcome is err, as StorageStalled when the watchdog ended the run.
func (w *Watch) Outcome(err error) error {
	if err == nil || !w.HasStalled() {
		return err
	}
	return &mover.Error{Reason: mover.ReasonStorageStalled,
		Err: fmt.Errorf("S3 made no progress for %v (server frozen or network stalled): %w", w.Idle, err)}
}

// Store is store whose reads are S3 calls of the watchdog: each Read of an object blocked on
// S3 is a call in flight.
func (w *Watch) Store(store *objectstore.Store) Store { return watchedStore{store, w.Activity} }

type watchedStore struct {
	*objectstore.Store
	act *Activity
}

func (s watchedStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	var body io.ReadCloser
	err := s.act.Do(func() (err error) {
		body, err = s.Store.Get(ctx, key)
		return err
	})
	if err != nil {
		return nil, err
	}
	return watchedBody{body, s.act}, nil
}

func (s watchedStore) Stat(ctx context.Context, key string) (info objectstore.ObjectInfo, err error) {
	err = s.act.Do(func() (err error) {
		info, err = s.Store.Stat(ctx, key)
		return err
	})
	return info, err
}

type watchedBody struct {
	io.ReadCloser
	act *Activity
}

func (b watchedBody) Read(p []byte) (int, error) {
	done := b.act.Call()
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		done(nil)
	} else {
		done(err)
	}
	return n, err
}
