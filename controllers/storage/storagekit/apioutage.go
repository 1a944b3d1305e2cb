package storagekit

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	toolscache "k8s.io/client-go/tools/cache"
)

// What an API server outage does to the controllers, and what they do about it (issue 30,
// finding 10: after a 60 s outage a run whose Job had ended meanwhile was recorded 25-82 s after
// the API came back, and a tick was counted as skipped):
//   - client-go's reflectors retry a broken watch with a backoff of up to 30 s, jittered up to
//     60 s, that controller-runtime does not let the manager tune (client-go's ReflectorOptions
//     has a Backoff, its SharedInformer does not pass one): the cache shows the Job as running
//     until its informer relists, up to a minute after the API is back.
//   - a reconcile that failed during the outage was retried by the work queue's per-item
//     exponential backoff (flowcontrol.RateLimiter, to 2 min), 25-51 s apart by the end of a
//     60 s outage.
// So: a reconcile that cannot reach the API server retries every APIRetry, not with the growing
// backoff (a refused connection costs the API server nothing); and for APIOutageMemory after the
// last sign of an outage (a failed request, or a broken watch: APIOutages.WatchErrorHandler),
// the Job of an active run is read from the API server, not from the cache that may not have
// relisted yet. A run whose Job ended is then recorded within APIRetry of the API's return, and a
// tick is counted as skipped only when the uncached Job says the run is still going.

// APIRetry is how soon a reconcile that could not reach the API server tries again.
const APIRetry = 2 * time.Second

// APIOutageMemory is how long after the last sign of an outage the active runs' Jobs are read
// uncached: longer than the reflectors' longest retry (30 s, jittered to 60 s) and their relist.
const APIOutageMemory = 2 * time.Minute

// APIOutages remembers when the API server was last unreachable, for all controllers of the
// manager. The zero value (and nil) knows of no outage.
type APIOutages struct {
	last atomic.Int64 // unix nanoseconds
}

// Observe records that the API server was unreachable at t.
func (o *APIOutages) Observe(t time.Time) {
	if o != nil {
		o.last.Store(t.UnixNano())
	}
}

// Recent tells whether the API server was unreachable within APIOutageMemory before now.
func (o *APIOutages) Recent(now time.Time) bool {
	if o == nil {
		return false
	}
	last := o.last.Load()
	return last != 0 && now.Sub(time.Unix(0, last)) < APIOutageMemory
}

// WatchErrorHandler is the manager cache's watch error handler (cache.Options
// DefaultWatchErrorHandler): a watch or list that could not reach the API server is a sign of an
// outage (an expired resource version or another answer is not); client-go's default handler
// then logs it as always.
func (o *APIOutages) WatchErrorHandler(ctx context.Context, r *toolscache.Reflector, err error) {
	if APIUnreachable(err) {
		o.Observe(time.Now())
	}
	toolscache.DefaultWatchErrorHandler(ctx, r, err)
}

// APIUnreachable tells whether err says the API server could not be reached at all (a refused
// or reset connection, one closed under a request), as opposed to an answer. An answer that
// says the server is overloaded or failing (429, 500, 503, timeouts) keeps the work queue's
// backoff: retrying those every APIRetry would add to the load.
func APIUnreachable(err error) bool {
	if err == nil {
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return false
	}
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
}
