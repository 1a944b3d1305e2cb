package cache

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/jsonpath"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
)

// The stories of this file come from a table of bad input: each is a way a user's RedisCache can be
// wrong, and what the operator must (not) do about it.

// child is an object a RedisCache can own, and where it is.
type child struct {
	obj client.Object
	key types.NamespacedName
}

// childrenOf returns the four children a RedisCache can have, keyed by kind.
func childrenOf(rc *cachev1beta1.RedisCache) map[string]child {
	key := client.ObjectKeyFromObject(rc)
	return map[string]child{
		"ConfigMap":           {&corev1.ConfigMap{}, types.NamespacedName{Namespace: rc.Namespace, Name: rc.Name + "-config"}},
		"Deployment":          {&appsv1.Deployment{}, key},
		"Service":             {&corev1.Service{}, key},
		"PodDisruptionBudget": {&policyv1.PodDisruptionBudget{}, key},
	}
}

// childVersions returns the resourceVersion of each child of rc, "" for a child that does not exist.
func childVersions(t *testing.T, rc *cachev1beta1.RedisCache) map[string]string {
	t.Helper()
	out := map[string]string{}
	for kind, c := range childrenOf(rc) {
		err := k8s.Get(testCtx, c.key, c.obj)
		switch {
		case apierrors.IsNotFound(err):
			out[kind] = ""
		case err != nil:
			t.Fatal(err)
		default:
			out[kind] = c.obj.GetResourceVersion()
		}
	}
	return out
}

// cpuLimitBelowRequest makes the spec ask for less CPU as a limit than as a request: admission of
// the RedisCache cannot see it (quantities are not compared in CEL), the API server rejects the
// Deployment built from it.
func cpuLimitBelowRequest(s *cachev1beta1.RedisCacheSpec) {
	s.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("50m")
	s.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("10m")
}

// TestInvalidSpecWritesNoChildren: a spec the operator finds invalid is judged in full before any
// write, so it creates no child and changes none.
func TestInvalidSpecWritesNoChildren(t *testing.T) {
	t.Run("a new cache gets no ConfigMap, Deployment, Service or PodDisruptionBudget", func(t *testing.T) {
		ns := newNamespace(t)
		rc := sampleCache(ns, "invalid-new", 2)
		cpuLimitBelowRequest(&rc.Spec)
		if err := k8s.Create(testCtx, rc); err != nil {
			t.Fatal(err)
		}
		waitForPhase(t, rc, cachev1beta1.PhaseDegraded, ReasonInvalidSpec)
		for kind, rv := range childVersions(t, rc) {
			if rv != "" {
				t.Errorf("the invalid RedisCache has a %s (resourceVersion %s)", kind, rv)
			}
		}
	})

	t.Run("an existing cache keeps its children unchanged", func(t *testing.T) {
		ns := newNamespace(t)
		rc := sampleCache(ns, "invalid-edit", 2)
		if err := k8s.Create(testCtx, rc); err != nil {
			t.Fatal(err)
		}
		playDeploymentController(t, client.ObjectKeyFromObject(rc), 2)
		ready := waitForPhase(t, rc, cachev1beta1.PhaseReady, ReasonAvailable)
		before := childVersions(t, rc)
		cm := childrenOf(rc)["ConfigMap"]
		if err := k8s.Get(testCtx, cm.key, cm.obj); err != nil {
			t.Fatal(err)
		}
		conf := cm.obj.(*corev1.ConfigMap).Data[redisConfKey]

		// One edit that changes the configuration and makes the Deployment invalid.
		patchSpec(t, ready, func(s *cachev1beta1.RedisCacheSpec) {
			s.Redis.Memory.EvictionPolicy = cachev1beta1.EvictionVolatileTTL
			cpuLimitBelowRequest(s)
		})
		waitForPhase(t, rc, cachev1beta1.PhaseDegraded, ReasonInvalidSpec)
		if after := childVersions(t, rc); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("an invalid spec changed children:\nbefore %v\nafter  %v", before, after)
		}
		if err := k8s.Get(testCtx, cm.key, cm.obj); err != nil {
			t.Fatal(err)
		}
		if got := cm.obj.(*corev1.ConfigMap).Data[redisConfKey]; got != conf {
			t.Errorf("redis.conf was rewritten for a spec that never runs:\n%s", got)
		}
	})
}

// reconcileOnce runs one reconcile of rc outside the manager and returns its result. A
// reconcile that read rc from a cache that has not yet seen the manager's latest status write
// ends in a refused patch and a requeue after 1 s (Reconcile's conflict case; seen once in a
// cold CI run): it is run again, a few times at most, so a cache that polls every second for
// good still shows.
func reconcileOnce(t *testing.T, rc *cachev1beta1.RedisCache) ctrl.Result {
	t.Helper()
	r := &RedisCacheReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}
	for attempt := 1; ; attempt++ {
		res, err := r.Reconcile(testCtx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rc)})
		if err != nil {
			t.Fatal(err)
		}
		if res.RequeueAfter != time.Second || attempt == 10 {
			return res
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestZeroReplicasIsScaledDownWithoutPolling: replicas 0 ends as phase ScaledDown (Ready=True,
// reason ScaledDown) as soon as the Deployment asks for no pod and none is left, also on a control
// plane whose Deployment status never moves, and the cache is not polled once the Deployment's
// spec is at 0.
func TestZeroReplicasIsScaledDownWithoutPolling(t *testing.T) {
	t.Run("created with replicas 0, no Deployment controller", func(t *testing.T) {
		rc := sampleCache(newNamespace(t), "idle", 0)
		if err := k8s.Create(testCtx, rc); err != nil {
			t.Fatal(err)
		}
		got := waitForPhase(t, rc, cachev1beta1.PhaseScaledDown, ReasonScaledDown)
		if !meta.IsStatusConditionTrue(got.Status.Conditions, cachev1beta1.ConditionReady) ||
			!meta.IsStatusConditionFalse(got.Status.Conditions, cachev1beta1.ConditionProgressing) {
			t.Errorf("conditions of a scaled-down cache: %+v", got.Status.Conditions)
		}
		if res := reconcileOnce(t, rc); res.RequeueAfter != 0 {
			t.Errorf("a scaled-down cache is polled every %v", res.RequeueAfter)
		}
	})

	t.Run("scaled from 2 to 0", func(t *testing.T) {
		rc := sampleCache(newNamespace(t), "shrink", 2)
		key, ready := createReady(t, rc, 2)

		patchSpec(t, ready, func(s *cachev1beta1.RedisCacheSpec) { s.Replicas = new(int32(0)) })
		// The Deployment still reports the two pods: they are stopping.
		waitForPhase(t, rc, cachev1beta1.PhaseProgressing, ReasonScalingDown)
		if res := reconcileOnce(t, rc); res.RequeueAfter != 0 {
			t.Errorf("a cache scaling down to 0 is polled every %v; the Deployment status wakes it", res.RequeueAfter)
		}
		playDeploymentController(t, key, 0)
		waitForPhase(t, rc, cachev1beta1.PhaseScaledDown, ReasonScaledDown)
		if res := reconcileOnce(t, rc); res.RequeueAfter != 0 {
			t.Errorf("a scaled-down cache is polled every %v", res.RequeueAfter)
		}
	})
}

// TestPrinterColumnsOfTheSampleResolve follows the README tour: the v1beta1 sample is applied and
// reconciled on a control plane without a kubelet (no pod ever becomes ready), and every printer
// column of every served version resolves on it, the Available column (status.readyReplicas) to a
// number, both in the object read as unstructured and in the table kubectl gets from the server.
func TestPrinterColumnsOfTheSampleResolve(t *testing.T) {
	ns := newNamespace(t)
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", "cache_v1beta1_rediscache.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sample := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(raw, &sample.Object); err != nil {
		t.Fatal(err)
	}
	sample.SetNamespace(ns)
	if err := k8s.Create(testCtx, sample); err != nil {
		t.Fatal(err)
	}
	rc := &cachev1beta1.RedisCache{}
	rc.Namespace, rc.Name = ns, sample.GetName()
	waitForPhase(t, rc, cachev1beta1.PhaseProgressing, ReasonReplicasNotReady)

	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := k8s.Get(testCtx, client.ObjectKey{Name: "rediscaches.cache.okgoes.com"}, crd); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	clientset, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		version := v.(map[string]any)
		name := version["name"].(string)
		t.Run(name, func(t *testing.T) {
			obj := &unstructured.Unstructured{}
			obj.SetGroupVersionKind(schema.GroupVersionKind{Group: "cache.okgoes.com", Version: name, Kind: "RedisCache"})
			if err := k8s.Get(testCtx, client.ObjectKeyFromObject(sample), obj); err != nil {
				t.Fatal(err)
			}
			columns, _, _ := unstructured.NestedSlice(version, "additionalPrinterColumns")
			for _, c := range columns {
				col := c.(map[string]any)
				jp := jsonpath.New(col["name"].(string))
				if err := jp.Parse("{" + col["jsonPath"].(string) + "}"); err != nil {
					t.Fatal(err)
				}
				found, err := jp.FindResults(obj.Object)
				if err != nil || len(found) == 0 || len(found[0]) == 0 {
					t.Errorf("column %s (%s) does not resolve: %v", col["name"], col["jsonPath"], err)
				}
			}

			table := serverTable(t, clientset.CoreV1().RESTClient(), fmt.Sprintf("/apis/cache.okgoes.com/%s/namespaces/%s/rediscaches/%s", name, ns, sample.GetName()))
			for i, col := range table.ColumnDefinitions {
				if col.Name != "Available" {
					continue
				}
				if cell := table.Rows[0].Cells[i]; fmt.Sprint(cell) != "0" {
					t.Errorf("kubectl get shows AVAILABLE %#v, want 0", cell)
				}
				return
			}
			t.Errorf("no Available column in %+v", table.ColumnDefinitions)
		})
	}
}

// serverTable gets path as the table the API server prints for kubectl get.
func serverTable(t *testing.T, c rest.Interface, path string) *metav1.Table {
	t.Helper()
	raw, err := c.Get().AbsPath(path).SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(testCtx)
	if err != nil {
		t.Fatalf("table of %s: %v", path, err)
	}
	table := &metav1.Table{}
	if err := json.Unmarshal(raw, table); err != nil || len(table.Rows) != 1 {
		t.Fatalf("table of %s: %v: %s", path, err, raw)
	}
	return table
}

// unstructuredCache is a minimal valid RedisCache at the given version, with value set at path.
func unstructuredCache(ns, version string, path []string, value any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cache.okgoes.com/" + version,
		"kind":       "RedisCache",
		"metadata":   map[string]any{"namespace": ns, "name": "input"},
		"spec":       map[string]any{"replicas": int64(1)},
	}}
	if path != nil {
		if err := unstructured.SetNestedField(u.Object, value, path...); err != nil {
			panic(err)
		}
	}
	return u
}

// imageField is where each served version keeps the Redis image.
var imageField = map[string][]string{"v1alpha1": {"spec", "image"}, "v1beta1": {"spec", "redis", "image"}}

// TestAdmissionChecksImageReferences: an image that is not an image reference ("Redis:7": upper
// case repository) is refused at admission in both served versions, with a message that says what
// an image reference is; valid references, the samples among them, are accepted.
func TestAdmissionChecksImageReferences(t *testing.T) {
	ns := newNamespace(t)
	digest := "@sha256:" + strings.Repeat("0123456789abcdef", 4)
	for version, field := range imageField {
		t.Run(version, func(t *testing.T) {
			for _, image := range []string{"Redis:7", "redis 7", "redis:", "quay.io/Org/redis", "redis@sha256:abc", "-redis"} {
				err := k8s.Create(testCtx, unstructuredCache(ns, version, field, image), client.DryRunAll)
				want := strings.Join(field, ".") + ": Invalid value"
				if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "must be an image reference") {
					t.Errorf("image %q: want Invalid at %s saying what an image reference is, got %v", image, want, err)
				}
			}
			for _, image := range []string{cachev1beta1.DefaultImage, "redis", "redis:7", "localhost:5000/cache/redis:7.4",
				"[::1]:5000/redis", "registry.example.com/team/redis" + digest, "redis:7.4-alpine" + digest} {
				if err := k8s.Create(testCtx, unstructuredCache(ns, version, field, image), client.DryRunAll); err != nil {
					t.Errorf("valid image %q refused: %v", image, err)
				}
			}
		})
	}
	t.Run("samples", func(t *testing.T) {
		samples, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", "cache_*.yaml"))
		if err != nil || len(samples) != 2 {
			t.Fatalf("samples: %v %v", samples, err)
		}
		for _, path := range samples {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(raw, &u.Object); err != nil {
				t.Fatal(err)
			}
			u.SetNamespace(ns)
			if err := k8s.Create(testCtx, u, client.DryRunAll); err != nil {
				t.Errorf("%s refused: %v", path, err)
			}
		}
	})
}

// TestAdmissionMessagesAreComplete: one invalid field gets one precise error from the API server.
// The message must not end with "some validation rules were not checked because the object was
// invalid" (what the API server appends when an OpenAPI enum, maxLength, maxItems, required or type
// error made it skip the CEL rules) nor report a CEL cost budget.
func TestAdmissionMessagesAreComplete(t *testing.T) {
	ns := newNamespace(t)
	tests := []struct {
		version string
		path    []string
		value   any
	}{
		{"v1beta1", []string{"spec", "redis", "memory", "evictionPolicy"}, "lru"},
		{"v1alpha1", []string{"spec", "eviction", "policy"}, "lru"},
		{"v1beta1", []string{"spec", "redis", "imagePullPolicy"}, "Sometimes"},
		{"v1alpha1", []string{"spec", "imagePullPolicy"}, "Sometimes"},
		{"v1beta1", []string{"spec", "redis", "image"}, "Redis:7"},
		{"v1alpha1", []string{"spec", "image"}, "Redis:7"},
		{"v1beta1", []string{"spec", "redis", "memory", "maxMemory"}, "1k"},
		{"v1alpha1", []string{"spec", "eviction", "maxMemory"}, "1k"},
		{"v1beta1", []string{"spec", "replicas"}, int64(-1)},
		{"v1beta1", []string{"spec", "redis", "port"}, int64(80)},
		{"v1beta1", []string{"spec", "redis", "maxClients"}, int64(0)},
		{"v1beta1", []string{"spec", "redis", "auth", "secretRef", "name"}, "Bad_Name"},
		{"v1beta1", []string{"metadata", "name"}, "a.b"},
	}
	for _, tt := range tests {
		field := strings.Join(tt.path, ".")
		t.Run(tt.version+" "+field, func(t *testing.T) {
			err := k8s.Create(testCtx, unstructuredCache(ns, tt.version, tt.path, tt.value), client.DryRunAll)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), field) {
				t.Fatalf("want Invalid at %s, got %v", field, err)
			}
			t.Log(err)
			for _, bad := range []string{"some validation rules were not checked", "cost exceeds budget", "cost budget"} {
				if strings.Contains(err.Error(), bad) {
					t.Errorf("the message reports %q: %v", bad, err)
				}
			}
			if causes := len(err.(apierrors.APIStatus).Status().Details.Causes); causes != 1 {
				t.Errorf("%d causes for one invalid field: %v", causes, err)
			}
		})
	}
}
