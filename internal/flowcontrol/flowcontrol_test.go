package flowcontrol

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestRateLimiterBacksOffPerItemUpToTwoMinutes(t *testing.T) {
	rl := RateLimiter()
	item := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "a"}}
	if d := rl.When(item); d != 100*time.Millisecond {
		t.Errorf("first failure waits %s, want 100ms", d)
	}
	if d := rl.When(item); d != 200*time.Millisecond {
		t.Errorf("second failure waits %s, want 200ms", d)
	}
	var d time.Duration
	for i := 0; i < 30; i++ {
		d = rl.When(item)
	}
	if d != 2*time.Minute {
		t.Errorf("backoff capped at %s, want 2m", d)
	}
	rl.Forget(item)
	if d := rl.When(item); d != 100*time.Millisecond {
		t.Errorf("after Forget the backoff restarts at %s, want 100ms", d)
	}
}

func TestRateLimiterBucketThrottlesMassChanges(t *testing.T) {
	rl := RateLimiter()
	var last time.Duration
	for i := 0; i < 150; i++ { // 150 different objects at once: burst 50, then 20 per second
		last = rl.When(reconcile.Request{NamespacedName: types.NamespacedName{Name: string(rune('a' + i%26)), Namespace: string(rune('a' + i/26))}})
	}
	// The 150th item waits for (150-50)/20 = 5 s of bucket refill (minus the time the loop took).
	if last < 4*time.Second || last > 5*time.Second {
		t.Errorf("150th distinct item waits %s, want about 5s", last)
	}
}
