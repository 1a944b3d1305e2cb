// Package flowcontrol holds the work-queue rate limiter every controller of the operator uses.
package flowcontrol

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// RateLimiter is the workqueue rate limiter of the design: the slower of a per-item exponential
// backoff (100ms to 2min) and a 20 qps / 50 burst bucket over all items, so a mass change cannot
// flood the API server.
func RateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](100*time.Millisecond, 2*time.Minute),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(20), 50)},
	)
}
