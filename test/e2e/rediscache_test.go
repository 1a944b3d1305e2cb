//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestRedisCacheRunsRealRedis applies the RedisCache sample (with the local Redis image): real Redis
// pods become ready and run the configured eviction policy; changing the policy rolls the pods onto
// the new configuration; deleting the RedisCache removes every child through the garbage collector.
func TestRedisCacheRunsRealRedis(t *testing.T) {
	alongside(t)
	ns := namespace(t, "e2e-redis")
	rc := sample(t, "cache_v1beta1_rediscache.yaml")
	rc.SetNamespace(ns)
	rc.SetName("cache")
	must(t, unstructured.SetNestedField(rc.Object, cfg.redisImage, "spec", "redis", "image"))
	policy, _, _ := unstructured.NestedString(rc.Object, "spec", "redis", "memory", "evictionPolicy")
	replicas, _, _ := unstructured.NestedInt64(rc.Object, "spec", "replicas")
	if policy == "" || replicas < 2 {
		t.Fatalf("the sample changed: evictionPolicy %q, replicas %d; this test expects a policy and >= 2 replicas", policy, replicas)
	}
	must(t, k8s.Create(ctx, rc))
	instance := map[string]string{"app.kubernetes.io/instance": "cache"}

	ready := waitForCache(t, rc, int(replicas))
	firstHash := str(ready, "status", "configHash")
	firstPods := redisPods(t, ns, instance)
	for _, p := range firstPods {
		if got := redisConfig(t, ns, p.Name, "maxmemory-policy"); got != policy {
			t.Errorf("pod %s: maxmemory-policy %q, want %q", p.Name, got, policy)
		}
		if got := redisConfig(t, ns, p.Name, "maxmemory"); got != "104857600" {
			t.Errorf("pod %s: maxmemory %q, want 104857600 (100Mi)", p.Name, got)
		}
	}

	t.Run("metrics show the cache", func(t *testing.T) {
		code, body, err := metricsScraper(t).get(metricsScraper(t).reader)
		if err != nil || code != 200 {
			t.Fatalf("scrape: %d %v", code, err)
		}
		want := fmt.Sprintf(`okgoes_rediscache_desired_replicas{name="cache",namespace="%s"} %d`, ns, replicas)
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	})

	t.Run("the v1alpha1 view of the same object", func(t *testing.T) {
		// Served through the conversion webhook of the manager pod.
		old := &unstructured.Unstructured{}
		old.SetGroupVersionKind(schema.GroupVersionKind{Group: "cache.okgoes.com", Version: "v1alpha1", Kind: "RedisCache"})
		must(t, k8s.Get(ctx, client.ObjectKeyFromObject(rc), old))
		if got := str(old, "spec", "eviction", "policy"); got != policy {
			t.Errorf("v1alpha1 spec.eviction.policy = %q, want %q", got, policy)
		}
	})

	t.Run("a policy change rolls the pods", func(t *testing.T) {
		newPolicy := "allkeys-lfu"
		if policy == newPolicy {
			newPolicy = "volatile-ttl"
		}
		patch := fmt.Sprintf(`{"spec":{"redis":{"memory":{"evictionPolicy":%q}}}}`, newPolicy)
		must(t, k8s.Patch(ctx, rc, client.RawPatch("application/merge-patch+json", []byte(patch))))
		rolled := waitForCache(t, rc, int(replicas))
		if str(rolled, "status", "configHash") == firstHash {
			t.Fatalf("config hash unchanged after the policy change: %s", firstHash)
		}
		pods := redisPods(t, ns, instance)
		old := map[string]bool{}
		for _, p := range firstPods {
			old[p.Name] = true
		}
		for _, p := range pods {
			if old[p.Name] {
				t.Errorf("pod %s from before the change still runs", p.Name)
			}
			if got := redisConfig(t, ns, p.Name, "maxmemory-policy"); got != newPolicy {
				t.Errorf("pod %s: maxmemory-policy %q, want %q", p.Name, got, newPolicy)
			}
		}
	})

	t.Run("deleting the RedisCache removes its children", func(t *testing.T) {
		lists := map[string]client.ObjectList{
			"Deployments": &appsv1.DeploymentList{}, "Services": &corev1.ServiceList{}, "ConfigMaps": &corev1.ConfigMapList{},
			"PodDisruptionBudgets": &policyv1.PodDisruptionBudgetList{}, "Pods": &corev1.PodList{},
		}
		count := func(list client.ObjectList) int {
			must(t, k8s.List(ctx, list, client.InNamespace(ns), client.MatchingLabels(instance)))
			return meta.LenList(list)
		}
		for kind, list := range lists {
			if count(list) == 0 {
				t.Fatalf("no %s of the cache before deletion: nothing to prove", kind)
			}
		}
		must(t, k8s.Delete(ctx, rc))
		eventually(t, "children of the deleted RedisCache gone", 2*time.Minute, func() (bool, string) {
			left := []string{}
			for kind, list := range lists {
				if n := count(list); n > 0 {
					left = append(left, fmt.Sprintf("%d %s", n, kind))
				}
			}
			return len(left) == 0, strings.Join(left, ", ")
		})
	})
}

// waitForCache waits until the RedisCache reports Ready for its current generation with all
// replicas ready, and returns it.
func waitForCache(t *testing.T, rc *unstructured.Unstructured, replicas int) *unstructured.Unstructured {
	t.Helper()
	var got *unstructured.Unstructured
	eventually(t, "RedisCache "+rc.GetName()+" Ready", 3*time.Minute, func() (bool, string) {
		got = get(t, rc)
		status, reason, msg := condition(got, "Ready")
		observed, _, _ := unstructured.NestedInt64(got.Object, "status", "observedGeneration")
		readyReplicas, _, _ := unstructured.NestedInt64(got.Object, "status", "readyReplicas")
		state := fmt.Sprintf("Ready=%s %s %q, generation %d observed %d, readyReplicas %d", status, reason, msg,
			got.GetGeneration(), observed, readyReplicas)
		return status == "True" && observed == got.GetGeneration() && int(readyReplicas) == replicas, state
	})
	return got
}

// redisPods are the running, ready, not terminating pods of the cache.
func redisPods(t *testing.T, ns string, labels map[string]string) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	for _, p := range podsOf(t, ns, labels) {
		if p.DeletionTimestamp == nil && podReady(&p) {
			pods = append(pods, p)
		}
	}
	if len(pods) == 0 {
		t.Fatalf("no ready Redis pod in %s", ns)
	}
	return pods
}

// redisConfig asks the Redis server in pod for a configuration value with redis-cli (kubectl exec).
func redisConfig(t *testing.T, ns, pod, key string) string {
	t.Helper()
	out, err := kubectl("-n", ns, "exec", pod, "-c", "redis", "--", "redis-cli", "CONFIG", "GET", key)
	if err != nil {
		t.Fatalf("redis-cli CONFIG GET %s in %s: %v\n%s", key, pod, err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[0] != key {
		t.Fatalf("redis-cli CONFIG GET %s in %s: unexpected answer %q", key, pod, out)
	}
	return lines[1]
}
