//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The operator-sdk story of the OLM suite: what docs/install.md tells a developer to run with the
// real operator-sdk v1.42.3 (bin/operator-sdk) against the OLM the suite installed, with the
// images pulled through a real OCI registry (hack/local-cluster.sh runs CNCF distribution at
// $E2E_REGISTRY and pushes the bundle, release and opm images into it).
const (
	sdkNamespace     = "okgoes-sdk" // where operator-sdk run bundle installs the operator
	sdkCatalogSource = olmPackage + "-catalog"
	sdkOperatorGroup = "operator-sdk-og"
)

var gvkOperatorGroup = schema.FromAPIVersionAndKind("operators.coreos.com/v1", "OperatorGroup")

// sdkRegistry is the registry the suite's images were pushed to, and the CA file of its
// certificate; the story's run bundle steps skip without one.
func (s *olmStory) sdkRegistry() (registry, ca string) {
	registry, ca = os.Getenv("E2E_REGISTRY"), os.Getenv("E2E_REGISTRY_CA")
	if registry == "" {
		s.t.Skip("no registry: E2E_REGISTRY names one that holds the bundle images (hack/local-cluster.sh olm pushes them)")
	}
	return registry, ca
}

// operatorSDK runs bin/operator-sdk with args and returns its output; a failure fails the step.
// The working directory is a temporary one: run bundle leaves image caches there. With a registry
// CA, SSL_CERT_FILE makes operator-sdk trust the registry's certificate: it pulls the index image
// over verified HTTPS whatever --use-http and --skip-tls-verify say (internal/olm/fbcutil.IsFBC).
func (s *olmStory) operatorSDK(ca string, args ...string) string {
	s.t.Helper()
	sdk := s.sdkBinary()
	c, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(c, sdk, args...)
	cmd.Dir = s.t.TempDir()
	cmd.Env = os.Environ()
	if ca != "" {
		cmd.Env = append(cmd.Env, "SSL_CERT_FILE="+ca)
	}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	s.t.Logf("operator-sdk %s (%.1fs):\n%s", strings.Join(args, " "), time.Since(start).Seconds(), out)
	if err != nil {
		s.t.Fatalf("operator-sdk %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// sdkBinary returns bin/operator-sdk. hack/local-cluster.sh olm builds it beside the suite's
// first steps when it is missing (E2E_OPERATOR_SDK_BUILD names the file its exit status goes to):
// the steps before the first operator-sdk step mostly wait for OLM, and a cold build takes 4-5
// minutes of the two cores. The first step that needs it waits for that build.
func (s *olmStory) sdkBinary() string {
	s.t.Helper()
	sdk := filepath.Join(cfg.root, "bin", "operator-sdk")
	status := os.Getenv("E2E_OPERATOR_SDK_BUILD")
	if status == "" {
		return sdk
	}
	start := time.Now()
	var rc []byte
	eventually(s.t, "the build of operator-sdk beside the suite ended ("+status+")", 30*time.Minute, func() (bool, string) {
		var err error
		rc, err = os.ReadFile(status)
		return err == nil, fmt.Sprint(err)
	})
	if code := strings.TrimSpace(string(rc)); code != "0" {
		s.t.Fatalf("building operator-sdk beside the suite failed (exit %s): see %s.log", code, strings.TrimSuffix(status, ".status"))
	}
	if waited := time.Since(start); waited > time.Second {
		s.t.Logf("waited %.1fs for the build of operator-sdk beside the suite", waited.Seconds())
	}
	return sdk
}

// sdkBundleValidate runs OperatorHub's checks with the real CLI, as docs/install.md tells a
// maintainer to before a release and as `make bundle-validate` does: `make test` runs the same
// validators through github.com/operator-framework/api (hack/bundle), this is the CLI itself.
// A warning fails too.
func (s *olmStory) sdkBundleValidate() {
	out := s.operatorSDK("", "bundle", "validate", filepath.Join(cfg.root, "bundle"), "--select-optional", "suite=operatorframework")
	if regexp.MustCompile(`level=(warning|error)`).MatchString(out) {
		s.t.Errorf("operator-sdk bundle validate reports warnings or errors (above)")
	}
	if !strings.Contains(out, "All validation tests have completed successfully") {
		s.t.Errorf("operator-sdk bundle validate does not report success (above)")
	}
}

// sdkOLMStatus runs `operator-sdk olm status`. This OLM has no packageserver CSV (the suite leaves
// it out), which is where the command reads the installed version from, and operator-sdk carries
// the manifests of OLM 0.25.0–0.27.0 only (any other version it downloads): --version 0.27.0
// compares the cluster with that release's resources, which v0.31.0 keeps under the same names.
func (s *olmStory) sdkOLMStatus() {
	out := s.operatorSDK("", "olm", "status", "--olm-namespace", olmNamespace, "--version", "0.27.0")
	for _, want := range []struct{ name, kind string }{
		{"olm-operator", "Deployment"},
		{"catalog-operator", "Deployment"},
		{"subscriptions.operators.coreos.com", "CustomResourceDefinition"},
		{"clusterserviceversions.operators.coreos.com", "CustomResourceDefinition"},
		{"olm-operator-serviceaccount", "ServiceAccount"},
	} {
		row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want.name) + `\s+(\S+\s+)?` + want.kind + `\s+Installed\s*$`)
		if !row.MatchString(out) {
			s.t.Errorf("operator-sdk olm status does not report %s %s installed", want.kind, want.name)
		}
	}
}

// sdkRunBundle installs 0.2.0 as `operator-sdk run bundle` does, from a cluster without the
// operator: the Subscription story's namespace and its CRDs are removed first. operator-sdk
// renders the bundle image and the index image from the registry into a file-based catalog, serves
// it from a pod running the index image (pulled from the registry), subscribes and approves; OLM
// unpacks the bundle from its image (pulled by tag from the registry). The namespace enforces the
// baseline Pod Security Standard: operator-sdk's registry pod does not set runAsNonRoot.
func (s *olmStory) sdkRunBundle() {
	registry, ca := s.sdkRegistry()
	must(s.t, client.IgnoreNotFound(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: olmOperatorNS}})))
	crdNames := []string{"pvcbackups.storage.okgoes.com", "pvcrestores.storage.okgoes.com", "rediscaches.cache.okgoes.com"}
	for _, name := range crdNames {
		crd := &unstructured.Unstructured{}
		crd.SetGroupVersionKind(gvkCRD)
		crd.SetName(name)
		must(s.t, client.IgnoreNotFound(k8s.Delete(ctx, crd)))
	}
	eventually(s.t, "the Subscription story's namespace and the okgoes CRDs gone", 3*time.Minute, func() (bool, string) {
		var left []string
		if err := k8s.Get(ctx, types.NamespacedName{Name: olmOperatorNS}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			left = append(left, "namespace "+olmOperatorNS)
		}
		for _, name := range crdNames {
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(gvkCRD)
			if err := k8s.Get(ctx, types.NamespacedName{Name: name}, crd); !apierrors.IsNotFound(err) {
				left = append(left, "CRD "+name)
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	})

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sdkNamespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/enforce-version": "latest"}}}
	must(s.t, k8s.Create(ctx, ns))
	s.installNS = sdkNamespace
	bundle, index := registry+"/okgoes/okgoes-operator-bundle:v0.2.0", registry+"/okgoes/opm:e2e"
	s.operatorSDK(ca, "run", "bundle", bundle, "--index-image", index, "--namespace", sdkNamespace, "--timeout", "5m")

	dep := s.waitInstalled("0.2.0")
	for _, name := range crdNames {
		if crd := s.crd(name); crd.GetCreationTimestamp().After(dep.CreationTimestamp.Time) {
			s.t.Errorf("CRD %s created at %s, after the operator's Deployment (%s)", name, crd.GetCreationTimestamp(), dep.CreationTimestamp)
		}
	}
	s.checkUnpackedFrom(sdkNamespace, "0.2.0", bundle)
	s.checkSDKCatalog(index, bundle)

	// A cache at 0.2.0, created at v1alpha1 (0.2.0's storage version), read back at v1beta1
	// through the conversion webhook.
	// The namespace outlives this step (the upgrade checks the cache); sdkCleanup deletes it.
	wl := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "olm-sdk-workloads-" + randomSuffix()}}
	must(s.t, k8s.Create(ctx, wl))
	s.sdkCache = object(s.t, fmt.Sprintf(`
apiVersion: cache.okgoes.com/v1alpha1
kind: RedisCache
metadata: {name: sessions, namespace: %s}
spec:
  replicas: 1
  image: %s
  resources:
    limits: {memory: 128Mi}
  eviction: {policy: allkeys-lru, maxMemory: 48Mi}
`, wl.Name, cfg.redisImage))
	must(s.t, k8s.Create(ctx, s.sdkCache))
	s.sdkCache = waitForCache(s.t, s.sdkCache, 1)
	if b := s.at("v1beta1", s.sdkCache); str(b, "spec", "redis", "memory", "maxMemory") != "48Mi" {
		s.t.Errorf("the 0.2.0 cache read at v1beta1: %s", mustJSON(b.Object["spec"]))
	}
}

// checkSDKCatalog checks what run bundle made to serve the catalog: the CatalogSource
// okgoes-operator-catalog points at a running registry pod of the index image, which lists the
// bundle among those it serves.
func (s *olmStory) checkSDKCatalog(index, bundle string) {
	cs := &unstructured.Unstructured{}
	cs.SetGroupVersionKind(gvkCatalogSource)
	must(s.t, k8s.Get(ctx, types.NamespacedName{Namespace: sdkNamespace, Name: sdkCatalogSource}, cs))
	podName := cs.GetAnnotations()["operators.operatorframework.io/registry-pod-name"]
	pod := &corev1.Pod{}
	must(s.t, k8s.Get(ctx, types.NamespacedName{Namespace: sdkNamespace, Name: podName}, pod))
	if pod.Spec.Containers[0].Image != index || pod.Status.Phase != corev1.PodRunning {
		s.t.Errorf("registry pod %s: image %s, %s; want %s, Running", podName, pod.Spec.Containers[0].Image, pod.Status.Phase, index)
	}
	if addr := str(cs, "spec", "address"); addr != pod.Status.PodIP+":50051" {
		s.t.Errorf("CatalogSource address %q, want the registry pod's %s:50051", addr, pod.Status.PodIP)
	}
	if injected := cs.GetAnnotations()["operators.operatorframework.io/injected-bundles"]; !strings.Contains(injected, bundle) {
		s.t.Errorf("CatalogSource injected-bundles %q lacks %s", injected, bundle)
	}
	s.t.Logf("CatalogSource %s/%s: address %s, registry pod %s (image %s)", sdkNamespace, sdkCatalogSource, str(cs, "spec", "address"), podName, index)
}

// sdkRunBundleUpgrade upgrades to 0.3.0 with `operator-sdk run bundle-upgrade`: OLM writes the
// CRDs (storage version v1beta1) before the new manager's ReplicaSet exists, the conversion
// webhook answers, storedVersions is migrated to [v1beta1], and the cache made under 0.2.0 is
// unchanged (spec, generation, config hash) and Ready.
func (s *olmStory) sdkRunBundleUpgrade() {
	registry, ca := s.sdkRegistry()
	if s.sdkCache == nil {
		s.t.Fatal("no cache from the run bundle step")
	}
	before := get(s.t, s.sdkCache)
	bundle := registry + "/okgoes/okgoes-operator-bundle:v0.3.0"
	s.operatorSDK(ca, "run", "bundle-upgrade", bundle, "--namespace", sdkNamespace, "--timeout", "5m")

	dep := s.waitInstalled("0.3.0")
	s.checkUnpackedFrom(sdkNamespace, "0.3.0", bundle)
	crd := s.crd("rediscaches.cache.okgoes.com")
	if t := lastUpdate(crd, "catalog"); t.After(s.newestReplicaSet(dep).CreationTimestamp.Time) {
		s.t.Errorf("the CRD was last written by OLM at %s, after the 0.3.0 manager's ReplicaSet was created", t)
	}
	for _, v := range nestedSlice(crd, "spec", "versions") {
		if v["name"] == "v1beta1" && v["storage"] != true {
			s.t.Errorf("v1beta1 is not the storage version after the upgrade: %s", mustJSON(crd.Object["spec"].(map[string]any)["versions"]))
		}
	}
	eventually(s.t, "storedVersions trimmed to [v1beta1]", 2*time.Minute, func() (bool, string) {
		stored, _, _ := unstructured.NestedStringSlice(s.crd("rediscaches.cache.okgoes.com").Object, "status", "storedVersions")
		return slices.Equal(stored, []string{"v1beta1"}), fmt.Sprint(stored)
	})
	after := waitForCache(s.t, s.sdkCache, 1)
	if after.GetGeneration() != before.GetGeneration() || str(after, "status", "configHash") != str(before, "status", "configHash") ||
		str(after, "spec", "eviction", "maxMemory") != "48Mi" || str(after, "spec", "eviction", "policy") != "allkeys-lru" {
		s.t.Errorf("the 0.2.0 cache changed across the upgrade: before %s, after %s", mustJSON(before.Object), mustJSON(after.Object))
	}
	if b := s.at("v1beta1", s.sdkCache); str(b, "spec", "redis", "memory", "evictionPolicy") != "allkeys-lru" {
		s.t.Errorf("the 0.2.0 cache read at v1beta1 after the upgrade: %s", mustJSON(b.Object["spec"]))
	}
	s.checkSDKCatalog(registry+"/okgoes/opm:e2e", bundle)
}

// sdkCleanup runs what docs/install.md tells users: delete the custom resources while the operator
// runs (the garbage collector removes the cache's children), then `operator-sdk cleanup
// okgoes-operator`, which with its default --delete-all=true removes the Subscription, the CSV (so
// the manager), the CatalogSource (so the registry pod), the OperatorGroup it made, and the CRDs.
// Deleting the CRD with the cache in it instead races the garbage collector: once the type is gone
// it cannot verify the cache is, and keeps the cache's Deployment (kubernetes/kubernetes#102641;
// seen once in CI).
func (s *olmStory) sdkCleanup() {
	_, ca := s.sdkRegistry()
	must(s.t, k8s.Delete(ctx, s.sdkCache))
	eventually(s.t, "the cache and its Redis Deployment gone, the operator still running", 2*time.Minute, func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(s.sdkCache), s.sdkCache.DeepCopy()); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("the RedisCache: %v", err)
		}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: s.sdkCache.GetNamespace(), Name: "sessions"}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("its Redis Deployment: %v", err)
		}
		return true, ""
	})
	s.operatorSDK(ca, "cleanup", olmPackage, "--namespace", sdkNamespace, "--timeout", "3m")
	eventually(s.t, "the operator, its catalog, its CRDs and the cache's Deployment gone", 3*time.Minute, func() (bool, string) {
		var left []string
		for _, o := range []struct {
			gvk        schema.GroupVersionKind
			ns, name   string
			namespaced bool
		}{
			{gvkSubscription, sdkNamespace, olmPackage, true},
			{gvkCSV, sdkNamespace, olmPackage + ".v0.3.0", true},
			{gvkCatalogSource, sdkNamespace, sdkCatalogSource, true},
			{gvkOperatorGroup, sdkNamespace, sdkOperatorGroup, true},
			{gvkCRD, "", "rediscaches.cache.okgoes.com", false},
			{gvkCRD, "", "pvcbackups.storage.okgoes.com", false},
			{gvkCRD, "", "pvcrestores.storage.okgoes.com", false},
		} {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(o.gvk)
			if err := k8s.Get(ctx, types.NamespacedName{Namespace: o.ns, Name: o.name}, u); !apierrors.IsNotFound(err) {
				left = append(left, fmt.Sprintf("%s %s (%v)", o.gvk.Kind, o.name, err))
			}
		}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: sdkNamespace, Name: "okgoes-operator-controller-manager"}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
			left = append(left, "the manager Deployment")
		}
		pods := &corev1.PodList{}
		must(s.t, k8s.List(ctx, pods, client.InNamespace(sdkNamespace)))
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded { // finished bundle unpack pods may wait for the garbage collector
				left = append(left, "pod "+p.Name)
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
	for _, ns := range []string{sdkNamespace, s.sdkCache.GetNamespace()} {
		must(s.t, k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
}
