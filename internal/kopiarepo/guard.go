package kopiarepo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kopia/kopia/repo/blob"
)

// ErrStorage is wrapped by the error of a Backup during which an S3 call failed after kopia's
// retries: kopia records a file whose chunks it could not upload as an entry it could not back
// up, so without this such a backup would look like an unreadable volume (ErrSourceUnreadable).
var ErrStorage = errors.New("S3 failed")

// Guard watches and bounds every S3 call of a Repo (Options.Guard). kopia does not pass the
// caller's context to all of them: it writes its log blobs in the background under a context
// no cancel reaches, and closing a repository waits for those writes, so a frozen S3 server
// held a mover in Close until the server thawed. A Guard ends such calls too.
type Guard struct {
	// Abort, when it ends, ends every S3 call in flight and fails every later one at once with
	// its cause, whatever context kopia gave the call.
	Abort context.Context
	// Call, when set, is called as an S3 call starts; what it returns is called as the call
	// ends (after kopia's retries), with its error.
	Call func() (done func(error))
}

// storageLink is what an Open hands the storage kopia makes from its connection file (by name,
// through links): the pack window, the Guard, and the S3 failures seen.
type storageLink struct {
	window  *packWindow
	meta    *metaPacks // nil: none (a connection with kopia's disk cache)
	guard   Guard
	failure atomic.Pointer[error] // the first S3 call that failed after kopia's retries
}

// links hands the link of an Open to the storage kopia creates from the connection file during
// that Open.
var links sync.Map // name → *storageLink

// failed is the first S3 failure through the link, or nil.
func (l *storageLink) failed() error {
	if p := l.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// do runs the S3 call f under ctx, which also ends when the Guard aborts, and records the first
// S3 failure. A call after a failure is still tried (kopia then flushes what a failed backup
// uploaded, so that the next one need not upload it again, when S3 is back by then); each
// fails after kopia's retries, about 8 s, when S3 is still away.
func (l *storageLink) do(ctx context.Context, f func(context.Context) error) error {
	done := func(error) {}
	if l.guard.Call != nil {
		done = l.guard.Call()
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if abort := l.guard.Abort; abort != nil {
		defer context.AfterFunc(abort, func() { cancel(context.Cause(abort)) })()
	}
	err := f(cctx)
	if err != nil && cctx.Err() != nil && ctx.Err() == nil {
		// ended by the Guard: name its cause, not only "context canceled"
		err = fmt.Errorf("%w: %w", context.Cause(cctx), err)
	}
	done(err)
	if isStorageFailure(err) && ctx.Err() == nil && cctx.Err() == nil {
		l.failure.CompareAndSwap(nil, &err)
	}
	return err
}

// isStorageFailure tells an error of S3 itself (refused, reset, failed after kopia's retries,
// credentials refused) from an answer a caller expects (a blob that is not there).
func isStorageFailure(err error) bool {
	switch {
	case err == nil, errors.Is(err, blob.ErrBlobNotFound), errors.Is(err, blob.ErrBlobAlreadyExists),
		errors.Is(err, blob.ErrInvalidRange), errors.Is(err, blob.ErrSetTimeUnsupported),
		errors.Is(err, blob.ErrUnsupportedPutBlobOption), errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded):
		return false
	}
	return true
}

// guardedStorage is a blob.Storage whose every S3 call goes through a link's Guard.
type guardedStorage struct {
	blob.Storage
	link *storageLink
}

// GetBlob serves a range of a pack the window holds from memory, recorded as a call that
// succeeded (Guard.Call: the stall watch sees the restore's progress) but without link.do's
// context per call: every small file of a restore is such a read, and 8 readers deriving
// contexts of one parent contend on its lock (a mutex profile of a restore of 50,000 small
// files, docs/benchmarks.md "Restore: where the time goes"). Such a read served from memory
// through link.do before too (s3Storage.GetBlob), whatever the context.
func (g *guardedStorage) GetBlob(ctx context.Context, id blob.ID, offset, length int64, output blob.OutputBuffer) error {
	if held, err := g.link.window.read(id, offset, length, output); held {
		if g.link.guard.Call != nil {
			g.link.guard.Call()(err)
		}
		return err
	}
	if g.link.meta != nil && isMetadataPack(id) {
		whole := func(ctx context.Context, id blob.ID, output blob.OutputBuffer) error {
			return g.link.do(ctx, func(ctx context.Context) error { return g.Storage.GetBlob(ctx, id, 0, -1, output) })
		}
		if served, err := g.link.meta.read(ctx, id, offset, length, output, whole); served {
			return err
		}
	}
	return g.link.do(ctx, func(ctx context.Context) error { return g.Storage.GetBlob(ctx, id, offset, length, output) })
}

func (g *guardedStorage) GetMetadata(ctx context.Context, id blob.ID) (m blob.Metadata, err error) {
	err = g.link.do(ctx, func(ctx context.Context) (err error) {
		m, err = g.Storage.GetMetadata(ctx, id)
		return err
	})
	return m, err
}

func (g *guardedStorage) PutBlob(ctx context.Context, id blob.ID, data blob.Bytes, opts blob.PutOptions) error {
	return g.link.do(ctx, func(ctx context.Context) error { return g.Storage.PutBlob(ctx, id, data, opts) })
}

func (g *guardedStorage) DeleteBlob(ctx context.Context, id blob.ID) error {
	return g.link.do(ctx, func(ctx context.Context) error { return g.Storage.DeleteBlob(ctx, id) })
}

// ListBlobs ends when the callback returns an error: that error is the caller's, not S3's.
func (g *guardedStorage) ListBlobs(ctx context.Context, prefix blob.ID, callback func(blob.Metadata) error) error {
	var stopped error
	err := g.link.do(ctx, func(ctx context.Context) error {
		err := g.Storage.ListBlobs(ctx, prefix, func(m blob.Metadata) error {
			stopped = callback(m)
			return stopped
		})
		if stopped != nil && errors.Is(err, stopped) {
			return nil
		}
		return err
	})
	if err == nil && stopped != nil {
		return stopped
	}
	return err
}

func (g *guardedStorage) ExtendBlobRetention(ctx context.Context, id blob.ID, opts blob.ExtendOptions) error {
	return g.link.do(ctx, func(ctx context.Context) error { return g.Storage.ExtendBlobRetention(ctx, id, opts) })
}
