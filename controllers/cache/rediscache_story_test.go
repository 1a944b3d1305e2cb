package cache

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
)

// newNamespace creates a namespace of its own for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rc-"}}
	if err := k8s.Create(testCtx, ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func sampleCache(ns, name string, replicas int32) *cachev1beta1.RedisCache {
	mem := resource.MustParse("100Mi")
	return &cachev1beta1.RedisCache{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: cachev1beta1.RedisCacheSpec{
			Replicas: &replicas,
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
			},
			Redis: cachev1beta1.Redis{Memory: &cachev1beta1.Memory{EvictionPolicy: cachev1beta1.EvictionAllKeysLFU, MaxMemory: &mem}},
		},
	}
}

func getCache(t *testing.T, rc *cachev1beta1.RedisCache) *cachev1beta1.RedisCache {
	t.Helper()
	got := &cachev1beta1.RedisCache{}
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(rc), got); err != nil {
		t.Fatal(err)
	}
	return got
}

// playDeploymentController writes the status the Deployment controller and kubelet would write
// once every replica of the current template is ready. It first waits for the operator to have
// asked for the wanted number of replicas.
func playDeploymentController(t *testing.T, key types.NamespacedName, want int32) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		dep := &appsv1.Deployment{}
		if err := k8s.Get(testCtx, key, dep); err != nil {
			return err
		}
		n := *dep.Spec.Replicas
		if n != want {
			return fmt.Errorf("deployment asks for %d replicas, want %d", n, want)
		}
		dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: n, UpdatedReplicas: n,
			ReadyReplicas: n, AvailableReplicas: n}
		return k8s.Status().Update(testCtx, dep)
	})
}

// createReady creates rc, plays the Deployment controller for its replicas and waits until it is
// Ready; it returns rc's key and the Ready object.
func createReady(t *testing.T, rc *cachev1beta1.RedisCache, replicas int32) (types.NamespacedName, *cachev1beta1.RedisCache) {
	t.Helper()
	if err := k8s.Create(testCtx, rc); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(rc)
	playDeploymentController(t, key, replicas)
	return key, waitForPhase(t, rc, cachev1beta1.PhaseReady, ReasonAvailable)
}

func waitForPhase(t *testing.T, rc *cachev1beta1.RedisCache, phase cachev1beta1.Phase, reason string) *cachev1beta1.RedisCache {
	t.Helper()
	var got *cachev1beta1.RedisCache
	eventually(t, 30*time.Second, func() error {
		got = getCache(t, rc)
		ready := meta.FindStatusCondition(got.Status.Conditions, cachev1beta1.ConditionReady)
		if got.Status.Phase != phase || ready == nil || ready.Reason != reason || got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("phase=%q ready=%+v observedGeneration=%d generation=%d", got.Status.Phase, ready,
				got.Status.ObservedGeneration, got.Generation)
		}
		return nil
	})
	return got
}

func TestCreateConvergesToReady(t *testing.T) {
	ns := newNamespace(t)
	rc := sampleCache(ns, "sessions", 2)
	if err := k8s.Create(testCtx, rc); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(rc)

	// The children exist, controlled by the RedisCache, before any pod is ready.
	created := waitForPhase(t, rc, cachev1beta1.PhaseProgressing, ReasonReplicasNotReady)
	cm, dep, svc, pdb := &corev1.ConfigMap{}, &appsv1.Deployment{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{}
	for _, c := range []struct {
		obj client.Object
		key types.NamespacedName
	}{{cm, types.NamespacedName{Namespace: ns, Name: "sessions-config"}}, {dep, key}, {svc, key}, {pdb, key}} {
		if err := k8s.Get(testCtx, c.key, c.obj); err != nil {
			t.Fatalf("%T: %v", c.obj, err)
		}
		if !metav1.IsControlledBy(c.obj, created) {
			t.Errorf("%T %s is not controlled by the RedisCache: %+v", c.obj, c.key, c.obj.GetOwnerReferences())
		}
	}
	conf := cm.Data[redisConfKey]
	if !strings.Contains(conf, "maxmemory 104857600\n") || !strings.Contains(conf, "maxmemory-policy allkeys-lfu\n") {
		t.Errorf("redis.conf does not carry the eviction spec:\n%s", conf)
	}
	if got, want := dep.Spec.Template.Annotations[configHashAnnotation], configHash(conf); got != want || created.Status.ConfigHash != want {
		t.Errorf("config hash: template %q, status %q, want %q", got, created.Status.ConfigHash, want)
	}
	if got := dep.Spec.Template.Spec.Containers[0].Image; got != cachev1beta1.DefaultImage {
		t.Errorf("image was not defaulted by the CRD: %q", got)
	}
	if svc.Spec.Ports[0].Port != 6379 || svc.Spec.Selector["app.kubernetes.io/instance"] != "sessions" {
		t.Errorf("service: %+v", svc.Spec)
	}
	if pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("pdb maxUnavailable = %v", pdb.Spec.MaxUnavailable)
	}

	// The Deployment becomes ready: so does the cache.
	playDeploymentController(t, key, 2)
	ready := waitForPhase(t, rc, cachev1beta1.PhaseReady, ReasonAvailable)
	if ready.Status.ReadyReplicas != 2 {
		t.Errorf("readyReplicas = %d, want 2", ready.Status.ReadyReplicas)
	}
	if got := testutil.ToFloat64(readyReplicasGauge.WithLabelValues(ns, "sessions")); got != 2 {
		t.Errorf("okgoes_rediscache_ready_replicas = %v, want 2", got)
	}
	// The transitions were announced as Events on the RedisCache: not ready, then available.
	eventually(t, 30*time.Second, func() error {
		list := &corev1.EventList{}
		if err := k8s.List(testCtx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "RedisCache" && e.InvolvedObject.Name == "sessions" {
				seen[e.Reason] = true
			}
		}
		if !seen[ReasonReplicasNotReady] || !seen[ReasonAvailable] {
			return fmt.Errorf("events seen: %v", seen)
		}
		return nil
	})
}

func TestSpecChangesRollPodsOnlyWhenConfigChanges(t *testing.T) {
	ns := newNamespace(t)
	rc := sampleCache(ns, "shop", 3)
	key, before := createReady(t, rc, 3)

	// Scaling is not a configuration change: the hash stays, the PDB goes away at one replica.
	patchSpec(t, before, func(s *cachev1beta1.RedisCacheSpec) { s.Replicas = new(int32(1)) })
	playDeploymentController(t, key, 1)
	scaled := waitForPhase(t, rc, cachev1beta1.PhaseReady, ReasonAvailable)
	if scaled.Status.ConfigHash != before.Status.ConfigHash {
		t.Errorf("scaling changed the config hash %s -> %s", before.Status.ConfigHash, scaled.Status.ConfigHash)
	}
	eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(testCtx, key, &policyv1.PodDisruptionBudget{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pdb still there at one replica: %v", err)
		}
		return nil
	})

	// A policy change is: new hash on the pod template, new redis.conf in the ConfigMap.
	patchSpec(t, scaled, func(s *cachev1beta1.RedisCacheSpec) { s.Redis.Memory.EvictionPolicy = cachev1beta1.EvictionVolatileTTL })
	eventually(t, 30*time.Second, func() error {
		dep := &appsv1.Deployment{}
		if err := k8s.Get(testCtx, key, dep); err != nil {
			return err
		}
		if dep.Spec.Template.Annotations[configHashAnnotation] == before.Status.ConfigHash {
			return fmt.Errorf("template still has the old hash")
		}
		return nil
	})
	playDeploymentController(t, key, 1)
	changed := waitForPhase(t, rc, cachev1beta1.PhaseReady, ReasonAvailable)
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(testCtx, types.NamespacedName{Namespace: ns, Name: "shop-config"}, cm); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cm.Data[redisConfKey], "maxmemory-policy volatile-ttl") || changed.Status.ConfigHash != configHash(cm.Data[redisConfKey]) {
		t.Errorf("config not updated: hash %s, conf:\n%s", changed.Status.ConfigHash, cm.Data[redisConfKey])
	}
}

func patchSpec(t *testing.T, rc *cachev1beta1.RedisCache, change func(*cachev1beta1.RedisCacheSpec)) {
	t.Helper()
	base := rc.DeepCopy()
	change(&rc.Spec)
	if err := k8s.Patch(testCtx, rc, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

func TestChildrenChangedByOthersAreRestored(t *testing.T) {
	ns := newNamespace(t)
	rc := sampleCache(ns, "drift", 1)
	if err := k8s.Create(testCtx, rc); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(rc)
	playDeploymentController(t, key, 1)
	waitForPhase(t, rc, cachev1beta1.PhaseReady, ReasonAvailable)

	// Someone edits redis.conf by hand.
	cmKey := types.NamespacedName{Namespace: ns, Name: "drift-config"}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(testCtx, cmKey, cm); err != nil {
		t.Fatal(err)
	}
	want := cm.Data[redisConfKey]
	cm.Data[redisConfKey] = "maxmemory 1\n"
	if err := k8s.Update(testCtx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(testCtx, cmKey, cm); err != nil {
			return err
		}
		if cm.Data[redisConfKey] != want {
			return fmt.Errorf("configmap not restored: %q", cm.Data[redisConfKey])
		}
		return nil
	})

	// Someone changes the image and adds an annotation of their own: the image is restored, the
	// annotation (not ours) is kept.
	dep := &appsv1.Deployment{}
	if err := k8s.Get(testCtx, key, dep); err != nil {
		t.Fatal(err)
	}
	dep.Spec.Template.Spec.Containers[0].Image = "evil:1"
	dep.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = "2026-12-03T00:00:00Z"
	if err := k8s.Update(testCtx, dep); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(testCtx, key, dep); err != nil {
			return err
		}
		if img := dep.Spec.Template.Spec.Containers[0].Image; img != cachev1beta1.DefaultImage {
			return fmt.Errorf("image not restored: %s", img)
		}
		if dep.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] == "" {
			return fmt.Errorf("someone else's annotation was removed")
		}
		return nil
	})

	// Someone deletes the Service.
	svc := &corev1.Service{}
	if err := k8s.Get(testCtx, key, svc); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(testCtx, svc); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		got := &corev1.Service{}
		if err := k8s.Get(testCtx, key, got); err != nil {
			return err
		}
		if got.UID == svc.UID {
			return fmt.Errorf("service not recreated yet")
		}
		return nil
	})
}

func TestAdmissionRejectsInvalidSpecs(t *testing.T) {
	ns := newNamespace(t)
	tests := []struct {
		name    string
		mutate  func(*cachev1beta1.RedisCache)
		message string
	}{
		{"unknown eviction policy", func(rc *cachev1beta1.RedisCache) { rc.Spec.Redis.Memory.EvictionPolicy = "lru" }, "spec.redis.memory.evictionPolicy"},
		{"negative replicas", func(rc *cachev1beta1.RedisCache) { rc.Spec.Replicas = new(int32(-1)) }, "spec.replicas"},
		{"maxMemory below 1Mi", func(rc *cachev1beta1.RedisCache) {
			q := resource.MustParse("1k")
			rc.Spec.Redis.Memory.MaxMemory = &q
		}, "maxMemory must be at least 1Mi"},
		{"privileged port", func(rc *cachev1beta1.RedisCache) { rc.Spec.Redis.Port = 80 }, "spec.redis.port"},
		{"image with spaces", func(rc *cachev1beta1.RedisCache) { rc.Spec.Redis.Image = "redis 7" }, "spec.redis.image"},
		{"secret name that is not a DNS name", func(rc *cachev1beta1.RedisCache) {
			rc.Spec.Redis.Auth = &cachev1beta1.Auth{SecretRef: cachev1beta1.SecretKeyReference{Name: "Bad_Name"}}
		}, "spec.redis.auth.secretRef.name"},
		{"name too long for a Service", func(rc *cachev1beta1.RedisCache) { rc.Name = strings.Repeat("a", 64) }, "metadata.name"},
		{"name that is not a DNS label", func(rc *cachev1beta1.RedisCache) { rc.Name = "a.b" }, "metadata.name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := sampleCache(ns, "bad", 1)
			tt.mutate(rc)
			err := k8s.Create(testCtx, rc)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.message) {
				t.Fatalf("want an Invalid error mentioning %q, got %v", tt.message, err)
			}
		})
	}
	// And the positive control: the unmodified sample is accepted.
	if err := k8s.Create(testCtx, sampleCache(ns, "good", 1)); err != nil {
		t.Fatalf("valid sample rejected: %v", err)
	}
}

func TestInvalidSpecBecomesConditionWithoutHotLoop(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*cachev1beta1.RedisCacheSpec)
		message string
		fix     func(*cachev1beta1.RedisCacheSpec)
	}{
		{
			name: "maxMemory above the memory limit (checked by the controller)",
			mutate: func(s *cachev1beta1.RedisCacheSpec) {
				q := resource.MustParse("1Gi")
				s.Redis.Memory.MaxMemory = &q
			},
			message: "maxMemory (1Gi; spec.redis.memory in v1beta1, spec.eviction in v1alpha1) exceeds spec.resources.limits.memory (128Mi)",
			fix: func(s *cachev1beta1.RedisCacheSpec) {
				q := resource.MustParse("64Mi")
				s.Redis.Memory.MaxMemory = &q
			},
		},
		{
			name: "CPU request above its limit (rejected by the API server in the Deployment)",
			mutate: func(s *cachev1beta1.RedisCacheSpec) {
				s.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("10m")
			},
			message: "must be less than or equal to cpu limit",
			fix:     func(s *cachev1beta1.RedisCacheSpec) { delete(s.Resources.Limits, corev1.ResourceCPU) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNamespace(t)
			rc := sampleCache(ns, "invalid", 1)
			tt.mutate(&rc.Spec)
			if err := k8s.Create(testCtx, rc); err != nil {
				t.Fatalf("admission rejected a spec only the controller can judge: %v", err)
			}
			got := waitForPhase(t, rc, cachev1beta1.PhaseDegraded, ReasonInvalidSpec)
			ready := meta.FindStatusCondition(got.Status.Conditions, cachev1beta1.ConditionReady)
			if !strings.Contains(ready.Message, tt.message) {
				t.Errorf("message does not say what is wrong: %q", ready.Message)
			}

			key := client.ObjectKeyFromObject(rc)
			start := reconciles.Count(key)
			time.Sleep(3 * time.Second)
			n := reconciles.Count(key) - start
			if n > 1 {
				t.Errorf("%v reconciles of the invalid RedisCache in 3s: that is a retry loop", n)
			}
			t.Logf("reconciles in the 3s after InvalidSpec: %v", n)

			// Fixing the spec recovers.
			patchSpec(t, got, tt.fix)
			playDeploymentController(t, client.ObjectKeyFromObject(rc), 1)
			waitForPhase(t, rc, cachev1beta1.PhaseReady, ReasonAvailable)
		})
	}
}

// An auth Secret whose password is empty would start Redis without a password: it is waited for,
// with a message that says "empty", and no Deployment is written.
func TestEmptyAuthPasswordIsRefused(t *testing.T) {
	ns := newNamespace(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "redis-auth"}, Data: map[string][]byte{"password": {}}}
	if err := k8s.Create(testCtx, secret); err != nil {
		t.Fatal(err)
	}
	rc := sampleCache(ns, "open", 1)
	rc.Spec.Redis.Auth = &cachev1beta1.Auth{SecretRef: cachev1beta1.SecretKeyReference{Name: "redis-auth"}}
	if err := k8s.Create(testCtx, rc); err != nil {
		t.Fatal(err)
	}
	got := waitForPhase(t, rc, cachev1beta1.PhaseDegraded, ReasonAuthSecretNotFound)
	if c := meta.FindStatusCondition(got.Status.Conditions, cachev1beta1.ConditionReady); !strings.Contains(c.Message, "empty") {
		t.Errorf("Ready message %q does not say the password is empty", c.Message)
	}
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(rc), &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Redis Deployment was written with an empty password: %v", err)
	}
}

func TestMissingAuthSecretIsWaitedFor(t *testing.T) {
	ns := newNamespace(t)
	rc := sampleCache(ns, "locked", 1)
	rc.Spec.Redis.Auth = &cachev1beta1.Auth{SecretRef: cachev1beta1.SecretKeyReference{Name: "redis-auth"}}
	if err := k8s.Create(testCtx, rc); err != nil {
		t.Fatal(err)
	}
	waitForPhase(t, rc, cachev1beta1.PhaseDegraded, ReasonAuthSecretNotFound)

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "redis-auth"},
		StringData: map[string]string{"password": "s3cret-do-not-leak"}}
	if err := k8s.Create(testCtx, secret); err != nil {
		t.Fatal(err)
	}
	playDeploymentController(t, client.ObjectKeyFromObject(rc), 1)
	got := waitForPhase(t, rc, cachev1beta1.PhaseReady, ReasonAvailable)

	dep := &appsv1.Deployment{}
	if err := k8s.Get(testCtx, client.ObjectKeyFromObject(rc), dep); err != nil {
		t.Fatal(err)
	}
	env := dep.Spec.Template.Spec.Containers[0].Env
	if len(env) != 2 || env[0].ValueFrom == nil || env[0].ValueFrom.SecretKeyRef.Name != "redis-auth" {
		t.Errorf("password not passed by reference: %+v", env)
	}
	// The password is nowhere but in the Secret.
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(testCtx, types.NamespacedName{Namespace: ns, Name: "locked-config"}, cm); err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{"status": fmt.Sprint(got.Status), "configmap": fmt.Sprint(cm.Data), "deployment": fmt.Sprint(dep.Spec)} {
		if strings.Contains(s, "s3cret-do-not-leak") {
			t.Errorf("password leaked into the %s", what)
		}
	}
}

// TestConvergedCacheMakesNoWrites is the no-flap proof: once a cache is converged, reconciling it
// again and again writes nothing, and no resourceVersion moves.
func TestConvergedCacheMakesNoWrites(t *testing.T) {
	ns := newNamespace(t)
	rc := sampleCache(ns, "steady", 3)
	rc.Spec.Redis.Auth = &cachev1beta1.Auth{SecretRef: cachev1beta1.SecretKeyReference{Name: "steady-auth", Key: "pw"}}
	rc.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
	rc.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "cache", Effect: corev1.TaintEffectNoSchedule}}
	rc.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{
			TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/instance": "steady"}},
		}}},
	}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "steady-auth"}, StringData: map[string]string{"pw": "x"}}
	if err := k8s.Create(testCtx, secret); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(testCtx, rc); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(rc)
	playDeploymentController(t, key, 3)
	waitForPhase(t, rc, cachev1beta1.PhaseReady, ReasonAvailable)
	// Let the running manager finish whatever the status write above queued.
	time.Sleep(time.Second)

	versions := func() map[string]string {
		out := map[string]string{}
		for name, obj := range map[string]client.Object{
			"cache": &cachev1beta1.RedisCache{}, "deployment": &appsv1.Deployment{}, "service": &corev1.Service{},
			"pdb": &policyv1.PodDisruptionBudget{},
		} {
			if err := k8s.Get(testCtx, key, obj); err != nil {
				t.Fatal(err)
			}
			out[name] = obj.GetResourceVersion()
		}
		cm := &corev1.ConfigMap{}
		if err := k8s.Get(testCtx, types.NamespacedName{Namespace: ns, Name: "steady-config"}, cm); err != nil {
			t.Fatal(err)
		}
		out["configmap"] = cm.ResourceVersion
		return out
	}
	before := versions()

	wrapped, writes := writeCountingClient(t)
	r := &RedisCacheReconciler{Client: wrapped, APIReader: mgr.GetAPIReader()}
	for i := 0; i < 50; i++ {
		if _, err := r.Reconcile(testCtx, ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatalf("reconcile %d: %v", i, err)
		}
	}
	if n, written := writes(); n != 0 {
		t.Errorf("50 reconciles of a converged cache made %d writes: %v", n, written)
	}
	if after := versions(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("resourceVersions moved:\nbefore %v\nafter  %v", before, after)
	}
	n, _ := writes()
	t.Logf("writes in 50 forced reconciles of a converged cache: %d", n)
}

// writeCountingClient is a client of the manager's cache that counts every write it makes;
// writes returns the count and what was written.
func writeCountingClient(t *testing.T) (client.Client, func() (int64, []string)) {
	t.Helper()
	var writes atomic.Int64
	var mu sync.Mutex
	var written []string
	count := func(verb string, obj client.Object) {
		writes.Add(1)
		mu.Lock()
		defer mu.Unlock()
		written = append(written, fmt.Sprintf("%s %T %s", verb, obj, obj.GetName()))
	}
	direct, err := client.NewWithWatch(mgr.GetConfig(), client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: mgr.GetCache()}})
	if err != nil {
		t.Fatal(err)
	}
	wrapped := interceptor.NewClient(direct, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count("create", obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			count("update", obj)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			count("patch", obj)
			return c.Patch(ctx, obj, p, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			count("delete", obj)
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			count("update/"+sub, obj)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			count("patch/"+sub, obj)
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
	return wrapped, func() (int64, []string) {
		mu.Lock()
		defer mu.Unlock()
		return writes.Load(), append([]string(nil), written...)
	}
}

// TestRedisPodsPassRestrictedPodSecurity admits the operator's Redis pod template into a
// namespace that enforces the restricted Pod Security Standard, using the API server's own
// PodSecurity admission; a bare pod is the control that proves enforcement is on.
func TestRedisPodsPassRestrictedPodSecurity(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "restricted-", Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
	}}}
	if err := k8s.Create(testCtx, ns); err != nil {
		t.Fatal(err)
	}
	rc := sampleCache(ns.Name, "psa", 1)
	rc.Spec.Redis.Auth = &cachev1beta1.Auth{SecretRef: cachev1beta1.SecretKeyReference{Name: "psa-auth"}}
	if err := k8s.Create(testCtx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "psa-auth"},
		StringData: map[string]string{"password": "x"}}); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(testCtx, rc); err != nil {
		t.Fatal(err)
	}
	dep := &appsv1.Deployment{}
	eventually(t, 30*time.Second, func() error { return k8s.Get(testCtx, client.ObjectKeyFromObject(rc), dep) })

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "redis-from-template"}, Spec: dep.Spec.Template.Spec}
	if err := k8s.Create(testCtx, pod); err != nil {
		t.Errorf("the Redis pod template violates the restricted Pod Security Standard: %v", err)
	}
	// Replication mode: the StatefulSet's template (password file volume, masterauth) as well.
	repl := sampleCache(ns.Name, "psa-repl", 2)
	repl.Spec.Mode = cachev1beta1.ModeReplication
	repl.Spec.Redis.Auth = rc.Spec.Redis.Auth
	if err := k8s.Create(testCtx, repl); err != nil {
		t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	eventually(t, 30*time.Second, func() error { return k8s.Get(testCtx, client.ObjectKeyFromObject(repl), sts) })
	replPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "redis-from-statefulset"}, Spec: sts.Spec.Template.Spec}
	if err := k8s.Create(testCtx, replPod); err != nil {
		t.Errorf("the Replication pod template violates the restricted Pod Security Standard: %v", err)
	}
	if len(replPod.Spec.Volumes) != 3 {
		t.Errorf("the Replication pod template has volumes %v, want config, data and auth", replPod.Spec.Volumes)
	}
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "bare"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "redis"}}}}
	if err := k8s.Create(testCtx, bare); !apierrors.IsForbidden(err) {
		t.Errorf("control: a pod without a security context was not refused (PodSecurity admission off?): %v", err)
	}
}
