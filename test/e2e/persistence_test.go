//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestRedisCachePersistenceRestartsWarm runs a persistent RedisCache (Replication, 2 pods, AOF)
// on real pods and volumes: 100 keys acknowledged by the replica (WAIT 1), then every pod of the
// cache is deleted at once; the StatefulSet recreates them on the same claims, each Redis reloads
// its append-only file, the operator elects a primary, and all 100 keys are read back through the
// Service. Without persistence the same deletion empties the cache.
func TestRedisCachePersistenceRestartsWarm(t *testing.T) {
	alongside(t)
	ns := namespace(t, "e2e-warm")
	for i := range 2 {
		volumeFor(t, ns, fmt.Sprintf("data-warm-%d", i), "999:999") // the Redis image's uid
	}
	rc := sample(t, "cache_v1beta1_rediscache.yaml")
	rc.SetNamespace(ns)
	rc.SetName("warm")
	must(t, unstructured.SetNestedField(rc.Object, cfg.redisImage, "spec", "redis", "image"))
	must(t, unstructured.SetNestedField(rc.Object, "Replication", "spec", "mode"))
	must(t, unstructured.SetNestedField(rc.Object, int64(2), "spec", "replicas"))
	must(t, unstructured.SetNestedMap(rc.Object, map[string]any{
		"size": "1Gi", "storageClassName": cfg.storageClass, "appendOnly": true,
	}, "spec", "persistence"))
	must(t, k8s.Create(ctx, rc))
	waitForCache(t, rc, 2)
	writeIP := serviceIP(t, ns, "warm")
	cli := redisClientPod(t, ns)
	redisCLI := func(script string) (string, error) {
		return kubectl("-n", ns, "exec", cli, "--", "sh", "-c", script)
	}
	msetAcknowledged(t, redisCLI, writeIP, 1)

	labels := map[string]string{"app.kubernetes.io/instance": "warm", "app.kubernetes.io/name": "rediscache"}
	before := map[string]string{}
	for _, p := range podsOf(t, ns, labels) {
		before[p.Name] = string(p.UID)
	}
	start := time.Now()
	must(t, k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.MatchingLabels(labels)))
	eventually(t, "both pods of warm recreated and ready", 3*time.Minute, func() (bool, string) {
		n := 0
		for _, p := range podsOf(t, ns, labels) {
			if p.DeletionTimestamp == nil && podReady(&p) && before[p.Name] != "" && before[p.Name] != string(p.UID) {
				n++
			}
		}
		return n == 2, fmt.Sprintf("%d of 2 recreated and ready", n)
	})
	eventually(t, "100 keys through the Service warm after the restart", 2*time.Minute, func() (bool, string) {
		out, err := redisCLI(fmt.Sprintf("redis-cli -h %s -p 6379 DBSIZE && redis-cli -h %s -p 6379 GET k99", writeIP, writeIP))
		f := strings.Fields(out)
		return err == nil && len(f) == 2 && f[0] == "100" && f[1] == "v99", out
	})
	t.Logf("MEASURED: every pod of the persistent cache deleted; all 100 keys served through the Service again after %s",
		time.Since(start).Round(100*time.Millisecond))
	waitForCache(t, rc, 2)
}
