package cache

import (
	"context"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/okgoes/okgoes-operator/internal/redisadmin"
)

// Redis tells no one when it hangs (SIGSTOP, a stuck disk, a node out of CPU) or is cut off from
// the network: its pod stays Running, a TCP probe still connects, and the readiness probe, run by
// the kubelet on the pod's own node and loopback, passes for a partitioned pod. The primaryProbe
// is the operator's own look at every primary, once a second: a PING on a fresh connection,
// answered (by anything) within primaryProbeTimeout or not. A primary that stops answering, or
// answers again, wakes the cache's reconcile at once; the reconcile decides (decidePrimary), the
// probe only tells it when to look. It writes nothing to the API server.

const (
	// primaryProbeInterval is how often each primary is pinged.
	primaryProbeInterval = time.Second
	// primaryProbeTimeout is how long a PING may take. A healthy Redis answers in well under a
	// millisecond; a primary that needs longer is not serving its clients either.
	primaryProbeTimeout = time.Second
	// primaryProbeParallel bounds the PINGs in flight, whatever the number of caches.
	primaryProbeParallel = 32
)

// primaryProbe pings the pods labelled primary (read from the manager's cache) and sends the pod
// of every change of answer on events, which the controller maps to its RedisCache.
type primaryProbe struct {
	pods    client.Reader
	address PodAddress
	events  chan event.GenericEvent
	now     func() time.Time

	mu sync.Mutex
	// silent holds, per primary pod, when its PING that first went unanswered was sent.
	silent map[types.UID]time.Time
	// busy holds the pods whose PING is in flight: a pod is pinged once at a time.
	busy map[types.UID]bool
}

func newPrimaryProbe(pods client.Reader, address PodAddress, now func() time.Time) *primaryProbe {
	return &primaryProbe{pods: pods, address: address, now: now, events: make(chan event.GenericEvent, 64),
		silent: map[types.UID]time.Time{}, busy: map[types.UID]bool{}}
}

// Start runs the probe until ctx ends (a manager Runnable; on the leader only, as the reconciler).
func (p *primaryProbe) Start(ctx context.Context) error {
	sem := make(chan struct{}, primaryProbeParallel)
	t := time.NewTicker(primaryProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		pods := &corev1.PodList{}
		if err := p.pods.List(ctx, pods, client.MatchingLabels{roleLabel: rolePrimary}); err != nil {
			log.FromContext(ctx).Error(err, "primary probe: list the primary pods")
			continue
		}
		p.forgetAllBut(pods.Items)
		for i := range pods.Items {
			pod := &pods.Items[i]
			if !p.claim(pod) {
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			go func() {
				defer func() { <-sem }()
				p.ping(ctx, pod)
			}()
		}
	}
}

// claim marks pod's PING in flight; false when one already is, or the pod cannot be reached yet.
func (p *primaryProbe) claim(pod *corev1.Pod) bool {
	if pod.Status.PodIP == "" || pod.DeletionTimestamp != nil || replicationPodToCache(context.Background(), pod) == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy[pod.UID] {
		return false
	}
	p.busy[pod.UID] = true
	return true
}

// ping asks pod's Redis for a sign of life and sends pod on events when the answer changed.
func (p *primaryProbe) ping(ctx context.Context, pod *corev1.Pod) {
	host, port := p.address(pod, redisPort(pod))
	sent := p.now()
	err := redisadmin.Alive(ctx, joinHostPort(host, port), primaryProbeTimeout)
	p.mu.Lock()
	delete(p.busy, pod.UID)
	_, wasSilent := p.silent[pod.UID]
	switch {
	case err != nil && !wasSilent:
		p.silent[pod.UID] = sent
	case err == nil && wasSilent:
		delete(p.silent, pod.UID)
	}
	p.mu.Unlock()
	if (err != nil) == wasSilent || ctx.Err() != nil {
		return
	}
	log.FromContext(ctx).Info("primary probe: the primary's answer changed", "pod", pod.Namespace+"/"+pod.Name, "answers", err == nil, "error", errString(err))
	select {
	case p.events <- event.GenericEvent{Object: pod}:
	case <-ctx.Done():
	}
}

// silentSince is when the PING that first went unanswered by pod (uid) was sent, and whether it
// is silent now. The reconcile counts failoverAfterSeconds from there: the primary was gone
// before the reconcile could see it.
func (p *primaryProbe) silentSince(uid types.UID) (time.Time, bool) {
	if p == nil {
		return time.Time{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.silent[uid]
	return t, ok
}

// forgetAllBut drops what is known of pods no longer labelled primary.
func (p *primaryProbe) forgetAllBut(pods []corev1.Pod) {
	keep := make(map[types.UID]bool, len(pods))
	for i := range pods {
		keep[pods[i].UID] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for uid := range p.silent {
		if !keep[uid] {
			delete(p.silent, uid)
		}
	}
}

// redisPort is the container port named redis of a Redis pod (spec.redis.port of its cache).
func redisPort(pod *corev1.Pod) int32 {
	for _, c := range pod.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == redisPortName {
				return port.ContainerPort
			}
		}
	}
	return 6379
}

func joinHostPort(host string, port int32) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
