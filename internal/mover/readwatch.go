package mover

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// readWatch puts a restore or a verify under the idle watchdog, as a backup is: when an S3
// request (a read of the archive, a kopia repository's call) has made no progress for the idle
// timeout, the run's context ends, and with it every S3 call of the kopia repository, whatever
// context kopia gave it. Without it a restore from a frozen S3 server waited for the Job's
// deadline (6 hours by default).
type readWatch struct {
	ctx     context.Context // the run's: ends on a stall too
	idle    time.Duration
	act     *activity
	stalled context.Context // ends, with errStalled, on a stall only
	stop    func()
}

// watchReads starts the watchdog of a restore or verify, with the idle timeout of the
// environment (DefaultIdleTimeout when unset).
func watchReads(ctx context.Context, getenv func(string) string) (*readWatch, error) {
	idle := DefaultIdleTimeout
	if s := getenv(EnvIdleTimeout); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%s: %q is not a positive duration", EnvIdleTimeout, s)
		}
		idle = d
	}
	w := &readWatch{idle: idle}
	watching, stopWatching := context.WithCancel(context.WithoutCancel(ctx))
	stalled, stall := context.WithCancelCause(context.WithoutCancel(ctx))
	rctx, cancel := context.WithCancelCause(ctx)
	w.ctx, w.stalled = rctx, stalled
	w.act = watchActivity(watching, idle, func() { cancel(errStalled); stall(errStalled) })
	w.stop = func() { stopWatching(); cancel(nil); stall(nil) }
	return w, nil
}

// kopia is opts with the watchdog over the repository's S3 calls.
func (w *readWatch) kopia(opts KopiaOptions) KopiaOptions {
	opts.guard = kopiarepo.Guard{Abort: w.stalled, Call: w.act.call}
	return opts
}

// outcome is err, as StorageStalled when the watchdog ended the run.
func (w *readWatch) outcome(err error) error {
	if err == nil || context.Cause(w.stalled) != errStalled {
		return err
	}
	return &failure{ReasonStorageStalled, fmt.Errorf("S3 made no progress for %v (server frozen or network stalled): %w", w.idle, err)}
}

// watchedStore is an object store whose reads are S3 calls of the watchdog: each Read of an
// object blocked on S3 is a call in flight.
type watchedStore struct {
	*objectstore.Store
	act *activity
}

func (s watchedStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	var body io.ReadCloser
	err := s.act.do(func() (err error) {
		body, err = s.Store.Get(ctx, key)
		return err
	})
	if err != nil {
		return nil, err
	}
	return watchedBody{body, s.act}, nil
}

func (s watchedStore) Stat(ctx context.Context, key string) (info objectstore.ObjectInfo, err error) {
	err = s.act.do(func() (err error) {
		info, err = s.Store.Stat(ctx, key)
		return err
	})
	return info, err
}

type watchedBody struct {
	io.ReadCloser
	act *activity
}

func (b watchedBody) Read(p []byte) (int, error) {
	done := b.act.call()
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		done(nil)
	} else {
		done(err)
	}
	return n, err
}
