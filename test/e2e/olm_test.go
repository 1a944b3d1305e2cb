//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The OLM suite (E2E_OLM=1: hack/local-cluster.sh olm, run by make test-e2e after the e2e suite,
// on a cluster of its own): the real Operator Lifecycle Manager v0.31.0 installs the operator from
// a file-based catalog of releases/ and upgrades it through the stable channel, release by release,
// as a cluster operator with a Manual-approval Subscription sees it.
const (
	olmNamespace     = "olm"              // OLM's own namespace, also its global catalog namespace
	olmOperatorNS    = "okgoes-operators" // where the Subscription installs the operator
	olmPackage       = "okgoes-operator"
	olmCatalogSource = "okgoes-catalog"
	olmImage         = "okgoes.local/olm:e2e" // hack/images/build.sh olm
	opmImage         = "okgoes.local/opm:e2e" // hack/images/build.sh opm
	olmModule        = "github.com/operator-framework/operator-lifecycle-manager"
)

var (
	gvkCatalogSource = schema.FromAPIVersionAndKind("operators.coreos.com/v1alpha1", "CatalogSource")
	gvkSubscription  = schema.FromAPIVersionAndKind("operators.coreos.com/v1alpha1", "Subscription")
	gvkInstallPlan   = schema.FromAPIVersionAndKind("operators.coreos.com/v1alpha1", "InstallPlan")
	gvkCSV           = schema.FromAPIVersionAndKind("operators.coreos.com/v1alpha1", "ClusterServiceVersion")
	gvkCRD           = schema.FromAPIVersionAndKind("apiextensions.k8s.io/v1", "CustomResourceDefinition")
)

func TestOLM(t *testing.T) {
	if os.Getenv("E2E_OLM") != "1" {
		t.Skip("the OLM suite runs with E2E_OLM=1 on a cluster without the operator: hack/local-cluster.sh olm")
	}
	s := &olmStory{t: t, installNS: olmOperatorNS}
	t.Cleanup(s.report)
	if failed := s.step("preconditions: no okgoes CRDs yet, the release images are on the node", s.preconditions); failed {
		return
	}
	steps := []struct {
		name string
		run  func()
	}{
		{"install OLM v0.31.0: its CRDs server-side, then the olm and catalog operators", s.installOLM},
		{"publish a catalog holding 0.1.0 (bundle images by digest; opm serve in a pod, CatalogSource in olm)", func() { s.publish("0.1.0") }},
		{"subscribe to stable (Manual, startingCSV 0.1.0), approve: bundle unpacked from its image, CRDs first, then the operator runs", s.install},
		{"0.1.0 at work: a RedisCache with real Redis pods is Ready, a PVCBackup uploads to MinIO", s.workloads},
		{"publish 0.2.0 and approve: CRD with v1beta1 first, new manager, conversion through OLM's certificates", s.upgradeTo020},
		{"publish 0.3.0 and approve: storage version v1beta1, storedVersions migrated, a second backup", s.upgradeTo030},
		{"publish 0.4.0 and approve: spec.mode and the kopia engine; the caches keep their pods, the 0.3.0 PVCBackup stays on archives", s.upgradeTo040},
		{"scorecard: the okgoes stage of releases/0.4.0 against the installed operator, one pod per test as operator-sdk scorecard runs it", s.scorecard},
		{"operator-sdk scorecard (the real CLI v1.42.3) of the installed releases/0.4.0: basic, olm and okgoes suites, all 12 tests pass", s.sdkScorecard},
		{"uninstall (Subscription and CSV deleted): operator gone, CRDs, custom resources and S3 backups kept", s.uninstall},
		{"operator-sdk olm status: OLM's CRDs and operators reported installed", s.sdkOLMStatus},
		{"operator-sdk bundle validate ./bundle --select-optional suite=operatorframework (OperatorHub's checks): no error, no warning", s.sdkBundleValidate},
		{"operator-sdk run bundle <registry>/okgoes-operator-bundle:v0.2.0 --index-image <registry>/okgoes/opm:e2e: CRDs first, then the operator; a RedisCache at 0.2.0", s.sdkRunBundle},
		{"operator-sdk run bundle-upgrade <registry>/okgoes-operator-bundle:v0.3.0: CRD ahead of the controller, conversion live, the 0.2.0 cache kept", s.sdkRunBundleUpgrade},
		{"the cache deleted while the operator runs (its children go), then operator-sdk cleanup okgoes-operator: operator, catalog and CRDs removed", s.sdkCleanup},
	}
	for _, st := range steps {
		if s.step(st.name, st.run) {
			return
		}
	}
}

// olmStory is the state the steps of the OLM suite hand on to each other.
type olmStory struct {
	t         *testing.T
	installNS string // where the operator is installed: olmOperatorNS, then sdkNamespace
	olmDir    string // the OLM module's source (its deploy/ manifests)
	times     []string
	catalogN  int // catalogs published so far

	ns       string // the workloads' namespace
	s3       *s3Server
	cache    *unstructured.Unstructured // created at v1alpha1 under 0.1.0
	beta     *unstructured.Unstructured // created at v1beta1 under 0.2.0
	backup   *unstructured.Unstructured
	firstKey string // the S3 key of the first backup

	sdkCache *unstructured.Unstructured // created under the 0.2.0 that operator-sdk run bundle installed
}

// step runs one step, records how long it took, and reports whether it failed.
func (s *olmStory) step(name string, run func()) (failed bool) {
	s.t.Helper()
	start := time.Now()
	ok := s.t.Run(strings.ReplaceAll(name, "/", "-"), func(t *testing.T) {
		prev := s.t
		s.t = t
		defer func() { s.t = prev }()
		run()
	})
	line := fmt.Sprintf("%-6s %7.1fs  %s", map[bool]string{true: "ok", false: "FAILED"}[ok], time.Since(start).Seconds(), name)
	s.times = append(s.times, line)
	return !ok
}

// report prints each step with its duration (and writes it next to the failure dumps), and on
// failure dumps OLM and the operator.
func (s *olmStory) report() {
	summary := "OLM suite steps:\n" + strings.Join(s.times, "\n") + "\n"
	s.t.Log(summary)
	_ = os.MkdirAll(cfg.artifacts, 0o755)
	_ = os.WriteFile(filepath.Join(cfg.artifacts, "olm-steps.txt"), []byte(summary), 0o644)
	if s.t.Failed() {
		for _, ns := range []string{olmNamespace, olmOperatorNS, sdkNamespace} {
			dumpNamespaceObjects(s.t, ns)
		}
		out, _ := kubectl("get", "subscriptions,installplans,csv,catalogsources,operatorgroups", "-A", "-o", "yaml")
		_ = os.WriteFile(filepath.Join(cfg.artifacts, "olm-objects.yaml"), []byte(out), 0o644)
		for _, d := range []string{"olm-operator", "catalog-operator"} {
			out, _ := kubectl("-n", olmNamespace, "logs", "deploy/"+d, "--tail=200")
			s.t.Logf("----- last lines of %s:\n%s", d, out)
		}
		s.t.Log(clusterBrief())
	}
}

func (s *olmStory) preconditions() {
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(gvkCRD)
	err := k8s.Get(ctx, types.NamespacedName{Name: "rediscaches.cache.okgoes.com"}, crd)
	if err == nil && crd.GetLabels()["operators.coreos.com/"+olmPackage+"."+olmOperatorNS] == "" {
		s.t.Fatal("the cluster already has the okgoes CRDs, not from OLM (make deploy?): run the OLM suite on a cluster without them (hack/local-cluster.sh olm brings one up)")
	}
	if err == nil {
		s.t.Fatal("the cluster already has an OLM installation of okgoes-operator: run the OLM suite on a fresh cluster")
	}
	list := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", olmModule)
	list.Dir = filepath.Join(cfg.root, "hack", "tools", "olm") // the module that pins OLM
	list.Env = append(os.Environ(), "GONOSUMDB=github.com/operator-framework,github.com/openshift")
	out, err := list.CombinedOutput()
	if err != nil {
		s.t.Fatalf("locate OLM's manifests (hack/tools/olm): %v\n%s", err, out)
	}
	s.olmDir = strings.TrimSpace(string(out))
	if s.olmDir == "" {
		s.t.Fatalf("OLM's module is not in the module cache: run hack/tools/olm/build.sh")
	}
	// The managers OLM runs are the images the catalog pins in relatedImages.
	for _, v := range []string{"0.1.0", "0.2.0", "0.3.0", installedRelease} {
		ref, err := os.ReadFile(filepath.Join(cfg.root, "bin", "images", "operator-v"+v+".ref"))
		if err != nil {
			s.t.Fatalf("the manager image of %s: %v (hack/images/build.sh releases)", v, err)
		}
		if got, want := strings.TrimSpace(string(ref)), pinnedImages(s.t, v).Manager; got != want {
			s.t.Errorf("the manager image of %s is %s, releases/digests.yaml (and catalog/ relatedImages) pins %s", v, got, want)
		}
	}
}

// installOLM installs OLM from its own quickstart manifests, as `operator-sdk olm install` does,
// with three changes: the CRDs come from deploy/chart/crds (the quickstart's crds.yaml lacks
// OLMConfig, which the olm operator waits for), the images are the locally built okgoes.local/olm
// and okgoes.local/opm, and the packageserver CSV and the operatorhub.io CatalogSource are left
// out (no registry, no aggregated API needed to subscribe).
func (s *olmStory) installOLM() {
	crds := filepath.Join(s.olmDir, "deploy", "chart", "crds")
	if out, err := kubectl("apply", "--server-side", "-f", crds); err != nil {
		s.t.Fatalf("apply OLM CRDs: %v\n%s", err, out)
	}
	if out, err := kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", crds); err != nil {
		s.t.Fatalf("OLM CRDs not established: %v\n%s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(s.olmDir, "deploy", "upstream", "quickstart", "olm.yaml"))
	must(s.t, err)
	manifest := renderOLM(string(data))
	if out, err := kubectlIn(manifest, "apply", "--server-side", "-f", "-"); err != nil {
		s.t.Fatalf("apply OLM: %v\n%s", err, out)
	}
	for _, d := range []string{"olm-operator", "catalog-operator"} {
		if out, err := kubectl("-n", olmNamespace, "rollout", "status", "deployment/"+d, "--timeout=180s"); err != nil {
			s.t.Fatalf("%s: %v\n%s", d, err, out)
		}
	}
}

var upstreamOLMImage = regexp.MustCompile(`quay\.io/operator-framework/olm@sha256:[0-9a-f]+`)

// renderOLM adapts OLM's quickstart olm.yaml to this cluster (see installOLM).
func renderOLM(manifest string) string {
	var docs []string
	for _, doc := range strings.Split(manifest, "\n---") {
		if regexp.MustCompile(`(?m)^kind: (ClusterServiceVersion|CatalogSource)\s*$`).MatchString(doc) {
			continue
		}
		doc = upstreamOLMImage.ReplaceAllString(doc, olmImage)
		// The catalog operator's flags are spelled with one dash upstream; its cobra wants two.
		doc = strings.ReplaceAll(doc, "- '-namespace'", "- --namespace")
		doc = strings.ReplaceAll(doc, "- -configmapServerImage=quay.io/operator-framework/configmap-operator-registry:latest",
			"- --configmapServerImage="+opmImage+"\n          - --opmImage="+opmImage)
		doc = strings.ReplaceAll(doc, "- -util-image", "- --util-image")
		docs = append(docs, doc)
	}
	return strings.Join(docs, "\n---")
}

// bundleImage is the reference by digest of version's bundle image (hack/images/build.sh bundles
// writes bin/images/bundle-v<version>.ref), or "" when the suite publishes the registry-less form
// (E2E_OLM_BUNDLES=objects).
func bundleImage(t *testing.T, version string) string {
	if os.Getenv("E2E_OLM_BUNDLES") == "objects" {
		return ""
	}
	ref, err := os.ReadFile(filepath.Join(cfg.root, "bin", "images", "bundle-v"+version+".ref"))
	if err != nil {
		t.Fatalf("the bundle image of %s: %v (hack/images/build.sh bundles; or E2E_OLM_BUNDLES=objects)", version, err)
	}
	got := strings.TrimSpace(string(ref))
	if want := pinnedImages(t, version).Bundle; got != want {
		t.Fatalf("the bundle image of %s built from releases/%s is %s, but releases/digests.yaml (and catalog/) pins %s", version, version, got, want)
	}
	return got
}

// pinnedImages are the images releases/digests.yaml pins for version, by digest.
func pinnedImages(t *testing.T, version string) (pins struct{ Bundle, Manager string }) {
	data, err := os.ReadFile(filepath.Join(cfg.root, "releases", "digests.yaml"))
	must(t, err)
	var file struct {
		Releases map[string]struct {
			Bundle  string `json:"bundle"`
			Manager string `json:"manager"`
		} `json:"releases"`
	}
	must(t, yaml.Unmarshal(data, &file))
	r, ok := file.Releases[version]
	if !ok {
		t.Fatalf("releases/digests.yaml has no release %s (make release-digests)", version)
	}
	pins.Bundle, pins.Manager = r.Bundle, r.Manager
	return pins
}

// publish renders the catalog of releases/ up to version with hack/catalog and serves it with
// `opm serve` in a pod; the CatalogSource is pointed at it, as publishing a new catalog image
// would. The previous catalog's pod is removed. Bundles are named by their images pinned by
// digest, the published form: OLM unpacks each with a bundle unpack Job (checked by
// checkUnpacked). With E2E_OLM_BUNDLES=objects they have no image and carry every manifest in
// olm.bundle.object properties instead, so that OLM needs no bundle image.
func (s *olmStory) publish(version string) {
	s.catalogN++
	name := fmt.Sprintf("okgoes-catalog-%d", s.catalogN)
	root := s.t.TempDir()
	dirs, err := filepath.Glob(filepath.Join(cfg.root, "releases", "*.*.*"))
	must(s.t, err)
	must(s.t, os.MkdirAll(filepath.Join(root, "releases"), 0o755))
	var included []string
	for _, dir := range dirs {
		if v := filepath.Base(dir); semverLE(v, version) {
			if out, err := exec.Command("cp", "-r", dir, filepath.Join(root, "releases", v)).CombinedOutput(); err != nil {
				s.t.Fatalf("copy %s: %v\n%s", dir, err, out)
			}
			included = append(included, v)
		}
	}
	args := []string{"run", ".", "--root", root, "--out", filepath.Join(root, "catalog"), "--channel", "stable"}
	pinned := false
	for _, v := range included {
		if ref := bundleImage(s.t, v); ref != "" {
			args = append(args, "--bundle-image", v+"="+ref)
			pinned = true
		}
	}
	if !pinned {
		args = append(args, "--bundle-images=false")
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join(cfg.root, "hack", "catalog")
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("render the catalog: %v\n%s", err, out)
	}
	fbc, err := os.ReadFile(filepath.Join(root, "catalog", olmPackage, "catalog.yaml"))
	must(s.t, err)
	s.t.Logf("catalog %s: releases %v, %d bytes", name, included, len(fbc))

	labels := map[string]string{"app": name}
	// The catalog reaches opm in ConfigMaps, one per file (a ConfigMap holds at most 1 MiB, a
	// bundle with every manifest in olm.bundle.object ~200 KB): opm serve reads every file under
	// /configs, so the package and channel go in one file and each bundle in its own.
	files := splitCatalog(s.t, fbc)
	var objects []client.Object
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	for i, f := range files {
		cmName := fmt.Sprintf("%s-%d", name, i)
		objects = append(objects, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: olmNamespace, Name: cmName, Labels: labels},
			Data: map[string]string{f.name: f.content}})
		volumes = append(volumes, corev1.Volume{Name: fmt.Sprintf("catalog-%d", i),
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cmName}}}})
		// subPath: a ConfigMap volume's directory also has ..data links, which opm would read.
		mounts = append(mounts, corev1.VolumeMount{Name: fmt.Sprintf("catalog-%d", i), MountPath: "/configs/" + olmPackage + "/" + f.name, SubPath: f.name, ReadOnly: true})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: olmNamespace, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext:              &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "opm", Image: opmImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Args:           []string{"serve", "/configs", "--port", "50051"},
				Env:            []corev1.EnvVar{{Name: "TMPDIR", Value: "/tmp"}},
				Ports:          []corev1.ContainerPort{{Name: "grpc", ContainerPort: 50051}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(50051)}}, PeriodSeconds: 1},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				VolumeMounts: append(mounts, corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"}),
			}},
			Volumes: append(volumes, corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}),
		},
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: olmNamespace, Name: name},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "grpc", Port: 50051, TargetPort: intstr.FromInt32(50051)}}}}
	for _, o := range append(objects, pod, svc) {
		must(s.t, k8s.Create(ctx, o))
	}
	eventually(s.t, "catalog pod "+name+" ready", 2*time.Minute, func() (bool, string) {
		got := &corev1.Pod{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return false, err.Error()
		}
		return podReady(got), string(got.Status.Phase)
	})
	must(s.t, k8s.Get(ctx, client.ObjectKeyFromObject(svc), svc))
	address := svc.Spec.ClusterIP + ":50051" // no cluster DNS here: the Service's address

	cs := &unstructured.Unstructured{}
	cs.SetGroupVersionKind(gvkCatalogSource)
	cs.SetNamespace(olmNamespace)
	cs.SetName(olmCatalogSource)
	if s.catalogN == 1 {
		cs.Object["spec"] = map[string]any{"sourceType": "grpc", "address": address, "displayName": "okgoes (e2e)", "publisher": "okgoes"}
		must(s.t, k8s.Create(ctx, cs))
	} else {
		patch := fmt.Sprintf(`{"spec":{"address":%q}}`, address)
		must(s.t, k8s.Patch(ctx, cs, client.RawPatch(types.MergePatchType, []byte(patch))))
		old := fmt.Sprintf("okgoes-catalog-%d", s.catalogN-1)
		for _, o := range []client.Object{&corev1.Pod{}, &corev1.Service{}} {
			o.SetNamespace(olmNamespace)
			o.SetName(old)
			if err := k8s.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
				s.t.Errorf("delete %T %s: %v", o, old, err)
			}
		}
		if err := k8s.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(olmNamespace), client.MatchingLabels{"app": old}); err != nil {
			s.t.Errorf("delete the ConfigMaps of %s: %v", old, err)
		}
	}
	eventually(s.t, "CatalogSource connected to "+address, 2*time.Minute, func() (bool, string) {
		got := get(s.t, cs)
		return str(got, "status", "connectionState", "address") == address &&
			str(got, "status", "connectionState", "lastObservedState") == "READY", statusJSON(got)
	})
}

type catalogFile struct{ name, content string }

// splitCatalog splits a rendered catalog.yaml (YAML documents) into package.yaml (everything but
// the bundles: olm.package, olm.channel) and one bundle-<name>.yaml per olm.bundle.
func splitCatalog(t *testing.T, fbc []byte) []catalogFile {
	t.Helper()
	var pkg []string
	var bundles []catalogFile
	for _, doc := range strings.Split(string(fbc), "\n---\n") {
		doc = strings.TrimPrefix(strings.TrimSpace(doc), "---\n")
		if doc == "" {
			continue
		}
		var meta struct{ Schema, Name string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("the rendered catalog: %v", err)
		}
		if meta.Schema == "olm.bundle" {
			bundles = append(bundles, catalogFile{"bundle-" + meta.Name + ".yaml", "---\n" + doc + "\n"})
		} else {
			pkg = append(pkg, doc)
		}
	}
	if len(pkg) == 0 || len(bundles) == 0 {
		t.Fatalf("the rendered catalog has %d package/channel documents and %d bundles", len(pkg), len(bundles))
	}
	return append([]catalogFile{{"package.yaml", "---\n" + strings.Join(pkg, "\n---\n") + "\n"}}, bundles...)
}

// semverLE reports a <= b for x.y.z versions.
func semverLE(a, b string) bool {
	var pa, pb [3]int
	if n, _ := fmt.Sscanf(a, "%d.%d.%d", &pa[0], &pa[1], &pa[2]); n != 3 {
		return false
	}
	fmt.Sscanf(b, "%d.%d.%d", &pb[0], &pb[1], &pb[2])
	return slices.Compare(pa[:], pb[:]) <= 0
}

// install subscribes the way a cluster operator does (docs/install.md): a namespace enforcing the
// restricted Pod Security Standard, an OperatorGroup for all namespaces, a Subscription to stable
// with Manual approval starting at 0.1.0; then approves the InstallPlan.
func (s *olmStory) install() {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: olmOperatorNS, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}
	must(s.t, k8s.Create(ctx, ns))
	manifest := fmt.Sprintf(`apiVersion: operators.coreos.com/v1
kind: OperatorGroup
metadata: {name: okgoes, namespace: %[1]s}
spec: {}
---
apiVersion: operators.coreos.com/v1alpha1
kind: Subscription
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  channel: stable
  name: %[2]s
  source: %[3]s
  sourceNamespace: %[4]s
  installPlanApproval: Manual
  startingCSV: %[2]s.v0.1.0
`, olmOperatorNS, olmPackage, olmCatalogSource, olmNamespace)
	if out, err := kubectlIn(manifest, "apply", "-f", "-"); err != nil {
		s.t.Fatalf("subscribe: %v\n%s", err, out)
	}
	plan := s.approve("0.1.0")
	var crds []string
	for _, step := range nestedSlice(plan, "status", "plan") {
		if res, _ := step["resource"].(map[string]any); res["kind"] == "CustomResourceDefinition" {
			crds = append(crds, fmt.Sprint(res["name"]))
		}
	}
	slices.Sort(crds)
	if want := []string{"pvcbackups.storage.okgoes.com", "pvcrestores.storage.okgoes.com", "rediscaches.cache.okgoes.com"}; !slices.Equal(crds, want) {
		s.t.Errorf("the InstallPlan installs CRDs %v, want %v", crds, want)
	}
	dep := s.waitInstalled("0.1.0")
	// CRD ahead of the controller: every CRD existed, established, before the Deployment did.
	for _, name := range crds {
		crd := s.crd(name)
		if crd.GetCreationTimestamp().After(dep.CreationTimestamp.Time) {
			s.t.Errorf("CRD %s created at %s, after the operator's Deployment (%s)", name, crd.GetCreationTimestamp(), dep.CreationTimestamp)
		}
	}
}

// approve waits for the InstallPlan that installs version, checks it waits for approval, approves
// it and waits until OLM has carried it out.
func (s *olmStory) approve(version string) *unstructured.Unstructured {
	csv := olmPackage + ".v" + version
	var plan *unstructured.Unstructured
	eventually(s.t, "an InstallPlan for "+csv+" awaiting approval", 3*time.Minute, func() (bool, string) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvkInstallPlan)
		if err := k8s.List(ctx, list, client.InNamespace(olmOperatorNS)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for i := range list.Items {
			p := &list.Items[i]
			names, _, _ := unstructured.NestedStringSlice(p.Object, "spec", "clusterServiceVersionNames")
			seen = append(seen, fmt.Sprintf("%s %v phase=%s", p.GetName(), names, str(p, "status", "phase")))
			if slices.Contains(names, csv) && str(p, "status", "phase") == "RequiresApproval" {
				plan = p
				return true, ""
			}
		}
		return false, strings.Join(seen, "; ")
	})
	s.t.Logf("InstallPlan %s for %s: approving", plan.GetName(), csv)
	must(s.t, k8s.Patch(ctx, plan, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"approved":true}}`))))
	eventually(s.t, "InstallPlan "+plan.GetName()+" complete", 3*time.Minute, func() (bool, string) {
		plan = get(s.t, plan)
		if str(plan, "status", "phase") == "Failed" {
			s.t.Fatalf("InstallPlan failed:\n%s", statusJSON(plan))
		}
		return str(plan, "status", "phase") == "Complete", str(plan, "status", "phase")
	})
	s.checkUnpacked(version)
	return plan
}

// checkUnpacked checks that OLM installed version from its bundle image: a bundle unpack Job in
// the catalog's namespace pulled that image (its "pull" init container) and succeeded.
func (s *olmStory) checkUnpacked(version string) {
	ref := bundleImage(s.t, version)
	if ref == "" {
		return
	}
	s.checkUnpackedFrom(olmNamespace, version, ref)
}

// checkUnpackedFrom checks that a bundle unpack Job in ns (the catalog's namespace) pulled ref and
// succeeded.
func (s *olmStory) checkUnpackedFrom(ns, version, ref string) {
	jobs := &batchv1.JobList{}
	must(s.t, k8s.List(ctx, jobs, client.InNamespace(ns)))
	var seen []string
	for _, j := range jobs.Items {
		for _, c := range j.Spec.Template.Spec.InitContainers {
			seen = append(seen, j.Name+": "+c.Image)
			if c.Name != "pull" || c.Image != ref {
				continue
			}
			if j.Status.Succeeded < 1 {
				s.t.Errorf("the bundle unpack Job %s of %s did not succeed: %+v", j.Name, ref, j.Status)
			}
			s.t.Logf("bundle %s unpacked by Job %s/%s from %s", version, ns, j.Name, ref)
			return
		}
	}
	s.t.Errorf("no bundle unpack Job pulled %s; init containers: %v", ref, seen)
}

// waitInstalled waits until version is installed for good: its CSV Succeeded and the only one
// left, the manager rolled out, ready, running the release's image, and, for a release with the
// conversion webhook, the certificate settled (OLM deletes the replaced CSV, and with it the
// webhook certificate Secret that CSV still owns, then issues a new certificate and rolls the
// manager once more: ~15 s in which conversions fail, see docs/upgrades.md): the Secret belongs to
// this CSV, its CA is the CRD's caBundle and the one the running pods were given, and a conversion
// through the webhook answered. It returns the operator's Deployment.
func (s *olmStory) waitInstalled(version string) *appsv1.Deployment {
	name := olmPackage + ".v" + version
	start := time.Now()
	eventually(s.t, "CSV "+name+" Succeeded and the only CSV", 4*time.Minute, func() (bool, string) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvkCSV)
		if err := k8s.List(ctx, list, client.InNamespace(s.installNS)); err != nil {
			return false, err.Error()
		}
		var state []string
		for _, c := range list.Items {
			state = append(state, c.GetName()+"="+str(&c, "status", "phase")+" "+str(&c, "status", "message"))
		}
		return len(list.Items) == 1 && list.Items[0].GetName() == name && str(&list.Items[0], "status", "phase") == "Succeeded", strings.Join(state, "; ")
	})
	image := "quay.io/okgoes/okgoes-operator:v" + version
	dep := &appsv1.Deployment{}
	webhook := version != "0.1.0"
	eventually(s.t, "the "+version+" manager rolled out, ready, with the CA of the CRD", 3*time.Minute, func() (bool, string) {
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: s.installNS, Name: "okgoes-operator-controller-manager"}, dep); err != nil {
			return false, err.Error()
		}
		pods := podsOf(s.t, s.installNS, map[string]string{"control-plane": "controller-manager"})
		var state []string
		ready := 0
		for _, p := range pods {
			state = append(state, fmt.Sprintf("%s %s ready=%v", p.Name, p.Spec.Containers[0].Image, podReady(&p)))
			if p.Spec.Containers[0].Image == image && podReady(&p) && p.DeletionTimestamp == nil {
				ready++
			}
		}
		rolledOut := ready == 1 && len(pods) == 1 && dep.Status.ObservedGeneration == dep.Generation &&
			dep.Status.UpdatedReplicas == 1 && dep.Status.AvailableReplicas == 1
		if !webhook {
			return rolledOut, strings.Join(state, "; ")
		}
		caBundle, _ := base64.StdEncoding.DecodeString(str(s.crd("rediscaches.cache.okgoes.com"), "spec", "conversion", "webhook", "clientConfig", "caBundle"))
		sum := sha256.Sum256(caBundle)
		podHash := dep.Spec.Template.Annotations["olmcahash"]
		sameCA := podHash == hex.EncodeToString(sum[:])
		state = append(state, fmt.Sprintf("pod template olmcahash %.12s, CRD caBundle %.12x", podHash, sum))
		// OLM v0.31.0 reuses the replaced CSV's certificate Secret without making the new CSV
		// an owner (pkg/controller/install/certresources.go: `secret = existingSecret` drops the
		// owner it just added), so the garbage collector deletes it with the old CSV and OLM
		// rotates the certificate once more. Settled: the Secret belongs to this CSV.
		secret := &corev1.Secret{}
		ownedByThisCSV := false
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: s.installNS, Name: "okgoes-operator-controller-manager-service-cert"}, secret); err == nil {
			for _, o := range secret.OwnerReferences {
				ownedByThisCSV = ownedByThisCSV || (o.Kind == "ClusterServiceVersion" && o.Name == name)
			}
			state = append(state, fmt.Sprintf("certificate Secret owned by %v, olmcahash %.12s", ownerNames(secret.OwnerReferences), secret.Annotations["olmcahash"]))
		} else {
			state = append(state, "certificate Secret: "+err.Error())
		}
		return rolledOut && sameCA && ownedByThisCSV && secret.Annotations["olmcahash"] == podHash, strings.Join(state, "; ")
	})
	if webhook {
		// The version that is not the storage version (v1alpha1 until 0.2.0, v1beta1 from 0.3.0
		// on) goes through the webhook.
		probeVersion := "v1alpha1"
		if version == "0.2.0" {
			probeVersion = "v1beta1"
		}
		eventually(s.t, "a conversion through the webhook", 2*time.Minute, func() (bool, string) {
			probe := object(s.t, `
apiVersion: cache.okgoes.com/`+probeVersion+`
kind: RedisCache
metadata: {name: conversion-probe, namespace: default}
spec: {replicas: 1}
`)
			err := k8s.Create(ctx, probe, client.DryRunAll)
			return err == nil, fmt.Sprint(err)
		})
	}
	s.t.Logf("%s installed for good %.1fs after approval", name, time.Since(start).Seconds())
	return dep
}

func (s *olmStory) crd(name string) *unstructured.Unstructured {
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(gvkCRD)
	must(s.t, k8s.Get(ctx, types.NamespacedName{Name: name}, crd))
	return crd
}

// workloads runs what users run on 0.1.0: a RedisCache (v1alpha1, the only version 0.1.0 has)
// and a PVCBackup to a MinIO in the cluster, through the operator OLM installed.
func (s *olmStory) workloads() {
	// The namespace outlives this step: the later steps check these objects.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "olm-workloads-" + randomSuffix()}}
	must(s.t, k8s.Create(ctx, ns))
	s.ns = ns.Name
	s.cache = object(s.t, fmt.Sprintf(`
apiVersion: cache.okgoes.com/v1alpha1
kind: RedisCache
metadata: {name: sessions, namespace: %s}
spec:
  replicas: 1
  image: %s
  resources:
    limits: {memory: 128Mi}
  eviction: {policy: allkeys-lfu, maxMemory: 64Mi}
`, s.ns, cfg.redisImage))
	must(s.t, k8s.Create(ctx, s.cache))
	s.cache = waitForCache(s.t, s.cache, 1)

	s.s3 = deployMinIO(s.t, s.ns)
	claim(s.t, s.ns, "data")
	vols, mounts := claimVolume("data", false)
	runPod(s.t, s.ns, "write-data", "mkdir -p /data/db && seq 1 100000 > /data/db/numbers && echo hello > /data/README", vols, mounts)
	s.backup = object(s.t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCBackup
metadata: {name: nightly, namespace: %s}
spec:
  pvcName: data
  schedule: "0 2 * * *"
  trigger: {manual: olm-1}
  s3Bucket: %s
  s3:
    endpoint: %q
    insecure: true
    credentialsSecretRef: {name: %s}
`, s.ns, s.s3.bucket, s.s3.endpoint, s.s3.secret))
	must(s.t, k8s.Create(ctx, s.backup))
	s.firstKey = s.waitBackup("olm-1", "")
}

// waitBackup waits for the run of manual trigger token to succeed and returns its S3 key, which
// must be in the bucket and differ from previous (the last run's key, if any).
func (s *olmStory) waitBackup(token, previous string) string {
	var key string
	eventually(s.t, "backup run "+token+" succeeded", 4*time.Minute, func() (bool, string) {
		got := get(s.t, s.backup)
		if str(got, "status", "lastManualTrigger") != token || got.Object["status"].(map[string]any)["activeRun"] != nil {
			return false, statusJSON(got) // not started, or still running
		}
		if str(got, "status", "lastRun", "result") == "Failed" {
			s.t.Fatalf("backup failed:\n%s", statusJSON(got))
		}
		key = str(got, "status", "lastRun", "objectKey")
		return str(got, "status", "lastRun", "result") == "Succeeded" && key != previous, statusJSON(got)
	})
	s.s3.connect(s.t, s.ns) // the port-forward of an earlier step ended with it
	if _, ok := s.s3.keys(s.t, "")[key]; !ok {
		s.t.Fatalf("the backup %s is not in the bucket", key)
	}
	return key
}

// upgradeTo020 publishes 0.2.0 and approves the upgrade: OLM updates the CRD (v1beta1 served,
// conversion webhook with its own certificate) before it replaces the manager; the RedisCache made
// at v1alpha1 reads the same at both versions and is not recomputed.
func (s *olmStory) upgradeTo020() {
	before := get(s.t, s.cache)
	s.publish("0.2.0")
	s.approve("0.2.0")
	dep := s.waitInstalled("0.2.0")

	crd := s.crd("rediscaches.cache.okgoes.com")
	var served []string
	for _, v := range nestedSlice(crd, "spec", "versions") {
		if v["served"] == true {
			served = append(served, fmt.Sprint(v["name"]))
		}
	}
	if !slices.Equal(served, []string{"v1alpha1", "v1beta1"}) {
		s.t.Errorf("served versions %v, want [v1alpha1 v1beta1]", served)
	}
	conv := nestedMap(crd, "spec", "conversion", "webhook", "clientConfig")
	svc, _ := conv["service"].(map[string]any)
	if str(crd, "spec", "conversion", "strategy") != "Webhook" || svc["namespace"] != olmOperatorNS || conv["caBundle"] == nil {
		s.t.Fatalf("conversion is not OLM's webhook: %s", mustJSON(crd.Object["spec"].(map[string]any)["conversion"]))
	}
	s.t.Logf("conversion webhook: service %s/%s port %v, caBundle set by OLM", svc["namespace"], svc["name"], svc["port"])
	// The CRD was updated before the new manager's ReplicaSet existed.
	if t := lastUpdate(crd, "catalog"); t.After(s.newestReplicaSet(dep).CreationTimestamp.Time) {
		s.t.Errorf("the CRD was last written by OLM at %s, after the 0.2.0 manager's ReplicaSet was created", t)
	}

	alpha := get(s.t, s.cache)
	beta := s.at("v1beta1", s.cache)
	if str(beta, "spec", "redis", "memory", "maxMemory") != "64Mi" || str(beta, "spec", "redis", "memory", "evictionPolicy") != "allkeys-lfu" ||
		str(beta, "spec", "redis", "image") != cfg.redisImage {
		s.t.Errorf("the 0.1.0 cache read at v1beta1 lost settings: %s", mustJSON(beta.Object["spec"]))
	}
	if str(alpha, "spec", "eviction", "maxMemory") != "64Mi" || alpha.GetGeneration() != before.GetGeneration() ||
		str(alpha, "status", "configHash") != str(before, "status", "configHash") {
		s.t.Errorf("the cache changed across the upgrade: before %s, after %s", mustJSON(before.Object), mustJSON(alpha.Object))
	}
	waitForCache(s.t, s.cache, 1)

	// A v1beta1-only field survives a read at v1alpha1.
	s.beta = object(s.t, fmt.Sprintf(`
apiVersion: cache.okgoes.com/v1beta1
kind: RedisCache
metadata: {name: api, namespace: %s}
spec:
  replicas: 1
  redis:
    image: %s
    maxClients: 500
`, s.ns, cfg.redisImage))
	must(s.t, k8s.Create(ctx, s.beta))
	s.beta = waitForCache(s.t, s.beta, 1)
	if a := s.at("v1alpha1", s.beta); a.GetAnnotations()["cache.okgoes.com/v1beta1-fields"] == "" {
		s.t.Errorf("read at v1alpha1, the v1beta1 cache does not carry maxClients: %v", a.GetAnnotations())
	}
}

// upgradeTo030 publishes 0.3.0 and approves it: the CRD stores v1beta1, and the operator migrates
// what was stored at v1alpha1 and trims storedVersions. Backups go on.
func (s *olmStory) upgradeTo030() {
	s.publish("0.3.0")
	s.approve("0.3.0")
	s.waitInstalled("0.3.0")
	eventually(s.t, "storedVersions trimmed to [v1beta1]", 2*time.Minute, func() (bool, string) {
		stored, _, _ := unstructured.NestedStringSlice(s.crd("rediscaches.cache.okgoes.com").Object, "status", "storedVersions")
		return slices.Equal(stored, []string{"v1beta1"}), fmt.Sprint(stored)
	})
	waitForCache(s.t, s.cache, 1)
	waitForCache(s.t, s.beta, 1)
	if b := s.at("v1beta1", s.beta); str(b, "spec", "redis", "maxClients") != "500" {
		s.t.Errorf("maxClients after the storage switch: %s", mustJSON(b.Object["spec"]))
	}
	patch := `{"spec":{"trigger":{"manual":"olm-2"}}}`
	must(s.t, k8s.Patch(ctx, s.backup, client.RawPatch(types.MergePatchType, []byte(patch))))
	s.waitBackup("olm-2", s.firstKey)
}

// installedRelease is the release the Subscription ends on, which the scorecard steps score.
const installedRelease = "0.4.0"

// upgradeTo040 publishes 0.4.0 and approves it: the CRDs gain spec.mode (RedisCache) and
// spec.engine (PVCBackup). A cache made before spec.mode existed reads as Standalone and keeps its
// pods (no rollout); the PVCBackup 0.3.0 ran stays on the archive engine (docs/upgrades.md,
// "0.3.0 → 0.4.0"): status.engine Archive, and its next backup is an archive again.
func (s *olmStory) upgradeTo040() {
	redis := &appsv1.Deployment{}
	must(s.t, k8s.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: s.cache.GetName()}, redis))
	template := mustJSON(redis.Spec.Template)
	s.publish("0.4.0")
	s.approve("0.4.0")
	s.waitInstalled("0.4.0")
	for _, c := range []*unstructured.Unstructured{s.cache, s.beta} {
		waitForCache(s.t, c, 1)
		if m := str(s.at("v1beta1", c), "spec", "mode"); m != "Standalone" {
			s.t.Errorf("cache %s, made before spec.mode existed, reads as mode %q, want Standalone", c.GetName(), m)
		}
	}
	must(s.t, k8s.Get(ctx, client.ObjectKeyFromObject(redis), redis))
	if got := mustJSON(redis.Spec.Template); got != template {
		s.t.Errorf("the 0.4.0 manager changed the pod template of cache %s (a rollout on upgrade):\nbefore %s\nafter  %s", s.cache.GetName(), template, got)
	}
	eventually(s.t, "the 0.3.0 PVCBackup reports status.engine Archive", time.Minute, func() (bool, string) {
		got := get(s.t, s.backup)
		return str(got, "status", "engine") == "Archive", statusJSON(got)
	})
	patch := `{"spec":{"trigger":{"manual":"olm-3"}}}`
	must(s.t, k8s.Patch(ctx, s.backup, client.RawPatch(types.MergePatchType, []byte(patch))))
	key := s.waitBackup("olm-3", str(get(s.t, s.backup), "status", "lastRun", "objectKey"))
	if got := get(s.t, s.backup); !strings.HasSuffix(key, ".tar.zst") || str(got, "status", "lastRun", "engine") != "Archive" {
		s.t.Errorf("the first backup under 0.4.0 is %s (engine %q), want an archive (.tar.zst)", key, str(got, "status", "lastRun", "engine"))
	}
}

// scorecard runs the okgoes stage of the installed release's scorecard configuration against the
// installed operator the way `operator-sdk scorecard releases/0.4.0 --selector=suite=okgoes
// --service-account okgoes-scorecard` runs it: one pod per test, all at once (the stage is
// parallel), with the test image and entrypoint the configuration names, the bundle unpacked at
// /bundle from a ConfigMap that holds it as a tar.gz, SCORECARD_NAMESPACE set, as a
// ServiceAccount bound to scorecard/rbac.yaml only; a test's result is its pod's log, one
// v1alpha3 TestStatus. Every test must pass.
func (s *olmStory) scorecard() {
	bundleDir := filepath.Join(cfg.root, "releases", installedRelease)
	tests := scorecardTests(s.t, filepath.Join(bundleDir, "tests", "scorecard", "config.yaml"), "okgoes")
	ns := namespace(s.t, "olm-scorecard")
	const sa = "okgoes-scorecard"
	for _, args := range [][]string{
		{"apply", "-f", filepath.Join(cfg.root, "scorecard", "rbac.yaml")},
		{"-n", ns, "create", "serviceaccount", sa},
		{"-n", ns, "create", "rolebinding", sa, "--clusterrole=okgoes-scorecard", "--serviceaccount=" + ns + ":" + sa},
	} {
		if out, err := kubectl(args...); err != nil {
			s.t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	bundle := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scorecard-bundle"},
		BinaryData: map[string][]byte{"bundle.tar.gz": tarGz(s.t, bundleDir)}}
	must(s.t, k8s.Create(ctx, bundle))

	start := time.Now()
	pods := make([]*corev1.Pod, len(tests))
	for i, test := range tests {
		pods[i] = scorecardPod(ns, sa, bundle.Name, fmt.Sprintf("scorecard-%d", i), test)
		must(s.t, k8s.Create(ctx, pods[i]))
	}
	for i, test := range tests {
		name := strings.Join(test.Entrypoint, " ")
		pod := pods[i]
		eventually(s.t, "scorecard pod "+pod.Name+" ("+name+") finished", 6*time.Minute, func() (bool, string) {
			must(s.t, k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod))
			return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, string(pod.Status.Phase)
		})
		log, err := clients.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "scorecard-test"}).DoRaw(ctx)
		if err != nil || pod.Status.Phase != corev1.PodSucceeded {
			s.t.Errorf("scorecard %s: pod %s %s, log %q: %v", name, pod.Name, pod.Status.Phase, log, err)
			continue
		}
		var res struct {
			Results []struct {
				Name   string   `json:"name"`
				State  string   `json:"state"`
				Errors []string `json:"errors"`
				Log    string   `json:"log"`
			} `json:"results"`
		}
		// The whole log is the result, as scorecard reads it.
		if err := json.Unmarshal(log, &res); err != nil || len(res.Results) == 0 {
			s.t.Errorf("scorecard %s: the pod log is not one TestStatus: %v\n%s", name, err, log)
			continue
		}
		for _, r := range res.Results {
			s.t.Logf("scorecard %s (image %s, pod %s): %s, done %.1fs after the pods were created", r.Name, test.Image, pod.Name, r.State, time.Since(start).Seconds())
			checkScorecardResult(s.t, r.Name, r.State, r.Errors, r.Log)
		}
	}
	if len(tests) != 6 {
		s.t.Errorf("the okgoes stage has %d tests, want 6 (okgoes-scorecard --list)", len(tests))
	}
}

// sdkScorecard runs the real operator-sdk v1.42.3 (bin/operator-sdk, built from
// ../shared/third_party) as docs/install.md and scorecard/README.md tell users to, with every
// stage of a bundle's configuration — basic and olm from quay.io/operator-framework/scorecard-test:v1.42.3
// (built from the same source), okgoes from the okgoes scorecard image — as the ServiceAccount
// okgoes-scorecard bound to scorecard/rbac.yaml. --untar-image names the local untar image:
// operator-sdk's default is named by a digest no local build can have.
//
// `operator-sdk scorecard releases/0.4.0`, the installed release with its own configuration and no
// selector: all 12 tests (basic 1, olm 5, okgoes 6) must pass, and the command exit 0.
func (s *olmStory) sdkScorecard() {
	ns := namespace(s.t, "olm-sdk-scorecard")
	const sa = "okgoes-scorecard"
	for _, args := range [][]string{
		{"apply", "-f", filepath.Join(cfg.root, "scorecard", "rbac.yaml")},
		{"-n", ns, "create", "serviceaccount", sa},
		{"-n", ns, "create", "rolebinding", sa, "--clusterrole=okgoes-scorecard", "--serviceaccount=" + ns + ":" + sa},
	} {
		if out, err := kubectl(args...); err != nil {
			s.t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	suites := s.runSDKScorecard(ns, sa, filepath.Join(cfg.root, "releases", installedRelease))
	if suites["basic"] != 1 || suites["olm"] != 5 || suites["okgoes"] != 6 {
		s.t.Errorf("releases/%s: tests by suite %v, want basic 1, olm 5, okgoes 6", installedRelease, suites)
	}
}

// runSDKScorecard runs `operator-sdk scorecard <bundleDir> -o json` and checks that every result
// passes. It returns the number of tests by suite.
func (s *olmStory) runSDKScorecard(ns, sa, bundleDir string) map[string]int {
	sdk := filepath.Join(cfg.root, "bin", "operator-sdk")
	args := []string{"scorecard", bundleDir, "--kubeconfig", os.Getenv("KUBECONFIG"),
		"--namespace", ns, "--service-account", sa, "--untar-image", "okgoes.local/scorecard-untar:e2e",
		"--wait-time", "300s", "--output", "json"}
	s.t.Logf("%s %s", sdk, strings.Join(args, " "))
	start := time.Now()
	cmd := exec.Command(sdk, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var list struct {
		Items []struct {
			Spec struct {
				Image      string            `json:"image"`
				Entrypoint []string          `json:"entrypoint"`
				Labels     map[string]string `json:"labels"`
			} `json:"spec"`
			Status struct {
				Results []struct {
					Name   string   `json:"name"`
					State  string   `json:"state"`
					Errors []string `json:"errors"`
					Log    string   `json:"log"`
				} `json:"results"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &list); err != nil {
		s.t.Fatalf("operator-sdk scorecard (%v, %.1fs): the output is not a TestList: %v\nstdout:\n%s\nstderr:\n%s",
			runErr, time.Since(start).Seconds(), err, stdout.String(), stderr.String())
	}
	suites := map[string]int{}
	for _, item := range list.Items {
		suites[item.Spec.Labels["suite"]]++
		for _, r := range item.Status.Results {
			s.t.Logf("operator-sdk scorecard %s: suite %s, %s (image %s): %s", filepath.Base(bundleDir), item.Spec.Labels["suite"], r.Name, item.Spec.Image, r.State)
			checkScorecardResult(s.t, r.Name, r.State, r.Errors, r.Log)
		}
		if len(item.Status.Results) == 0 {
			s.t.Errorf("operator-sdk scorecard %v: no result", item.Spec.Entrypoint)
		}
	}
	s.t.Logf("operator-sdk scorecard %s: %d tests %v in %.1fs (exit: %v)", bundleDir, len(list.Items), suites, time.Since(start).Seconds(), runErr)
	if runErr != nil {
		s.t.Errorf("operator-sdk scorecard: %v\nstderr:\n%s", runErr, stderr.String())
	}
	return suites
}

// checkScorecardResult wants state pass.
func checkScorecardResult(t *testing.T, name, state string, errs []string, log string) {
	t.Helper()
	if state != "pass" {
		t.Errorf("scorecard %s: %s %v\n%s", name, state, errs, log)
	}
}

// scorecardTest is one test of a scorecard configuration (bundle/tests/scorecard/config.yaml,
// the v1alpha3 Configuration that operator-sdk reads).
type scorecardTest struct {
	Entrypoint []string          `json:"entrypoint"`
	Image      string            `json:"image"`
	Labels     map[string]string `json:"labels"`
}

// scorecardTests reads the tests of the configuration whose label suite is suite.
func scorecardTests(t *testing.T, file, suite string) []scorecardTest {
	data, err := os.ReadFile(file)
	must(t, err)
	var config struct {
		Stages []struct {
			Tests []scorecardTest `json:"tests"`
		} `json:"stages"`
	}
	must(t, yaml.Unmarshal(data, &config))
	var tests []scorecardTest
	for _, stage := range config.Stages {
		for _, test := range stage.Tests {
			if test.Labels["suite"] == suite {
				tests = append(tests, test)
			}
		}
	}
	return tests
}

// scorecardPod is the pod scorecard runs a test in: an init container unpacks the bundle from the
// ConfigMap into /bundle (scorecard's untar image; here the local busybox image), then the test
// image runs the entrypoint. Restricted Pod Security.
func scorecardPod(ns, sa, bundleConfigMap, name string, test scorecardTest) *corev1.Pod {
	restricted := &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	bundleMount := corev1.VolumeMount{Name: "bundle", MountPath: "/bundle"}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: test.Labels},
		Spec: corev1.PodSpec{
			ServiceAccountName: sa,
			RestartPolicy:      corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			InitContainers: []corev1.Container{{
				Name: "scorecard-untar", Image: cfg.toolsImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"tar", "-xzf", "/scorecard/bundle.tar.gz", "-C", "/bundle"},
				SecurityContext: restricted,
				VolumeMounts:    []corev1.VolumeMount{{Name: "scorecard", MountPath: "/scorecard", ReadOnly: true}, bundleMount},
			}},
			Containers: []corev1.Container{{
				Name: "scorecard-test", Image: test.Image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         test.Entrypoint,
				Env:             []corev1.EnvVar{{Name: "SCORECARD_NAMESPACE", Value: ns}},
				SecurityContext: restricted,
				VolumeMounts:    []corev1.VolumeMount{bundleMount},
			}},
			Volumes: []corev1.Volume{
				{Name: "scorecard", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: bundleConfigMap}}}},
				{Name: "bundle", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
}

// tarGz is dir as a gzipped tar, the form scorecard hands a bundle to its test pods in.
func tarGz(t *testing.T, dir string) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	must(t, tw.AddFS(os.DirFS(dir)))
	must(t, tw.Close())
	must(t, gz.Close())
	return buf.Bytes()
}

// uninstall removes the operator the way docs/install.md says: Subscription, then CSV. OLM
// removes the Deployment; the CRDs, the custom resources, what they made and the S3 backups stay.
func (s *olmStory) uninstall() {
	sub := &unstructured.Unstructured{}
	sub.SetGroupVersionKind(gvkSubscription)
	sub.SetNamespace(olmOperatorNS)
	sub.SetName(olmPackage)
	must(s.t, k8s.Delete(ctx, sub))
	csv := &unstructured.Unstructured{}
	csv.SetGroupVersionKind(gvkCSV)
	csv.SetNamespace(olmOperatorNS)
	csv.SetName(olmPackage + ".v" + installedRelease)
	must(s.t, k8s.Delete(ctx, csv))
	eventually(s.t, "the operator's Deployment and pods gone", 3*time.Minute, func() (bool, string) {
		err := k8s.Get(ctx, types.NamespacedName{Namespace: olmOperatorNS, Name: "okgoes-operator-controller-manager"}, &appsv1.Deployment{})
		pods := podsOf(s.t, olmOperatorNS, map[string]string{"control-plane": "controller-manager"})
		return apierrors.IsNotFound(err) && len(pods) == 0, fmt.Sprintf("deployment: %v, %d pods", err, len(pods))
	})
	for _, name := range []string{"rediscaches.cache.okgoes.com", "pvcbackups.storage.okgoes.com", "pvcrestores.storage.okgoes.com"} {
		s.crd(name)
	}
	for _, o := range []*unstructured.Unstructured{s.cache, s.beta, s.backup} {
		if got := get(s.t, o); !got.GetDeletionTimestamp().IsZero() {
			s.t.Errorf("%s %s is being deleted", got.GetKind(), got.GetName())
		}
	}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: "sessions"}, &appsv1.Deployment{}); err != nil {
		s.t.Errorf("the Redis Deployment of the cache: %v", err)
	}
	s.s3.connect(s.t, s.ns)
	keys := s.s3.keys(s.t, "")
	for _, key := range []string{s.firstKey, str(get(s.t, s.backup), "status", "lastRun", "objectKey")} {
		if _, ok := keys[key]; !ok {
			s.t.Errorf("backup %s is gone from the bucket after the uninstall (bucket: %v)", key, keys)
		}
	}
	// Without the operator nothing would remove the PVCBackup's finalizer: a user deleting the
	// namespace too removes it by hand (docs/install.md), and so does this test.
	must(s.t, k8s.Patch(ctx, s.backup, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))
	must(s.t, k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}))
}

// at reads u at apiVersion cache.okgoes.com/<version>.
func (s *olmStory) at(version string, u *unstructured.Unstructured) *unstructured.Unstructured {
	got := &unstructured.Unstructured{}
	got.SetAPIVersion("cache.okgoes.com/" + version)
	got.SetKind(u.GetKind())
	must(s.t, k8s.Get(ctx, client.ObjectKeyFromObject(u), got))
	return got
}

func (s *olmStory) newestReplicaSet(dep *appsv1.Deployment) appsv1.ReplicaSet {
	list := &appsv1.ReplicaSetList{}
	must(s.t, k8s.List(ctx, list, client.InNamespace(dep.Namespace), client.MatchingLabels(dep.Spec.Selector.MatchLabels)))
	var newest appsv1.ReplicaSet
	for _, rs := range list.Items {
		if rs.CreationTimestamp.After(newest.CreationTimestamp.Time) {
			newest = rs
		}
	}
	return newest
}

func ownerNames(refs []metav1.OwnerReference) []string {
	var names []string
	for _, r := range refs {
		names = append(names, r.Kind+"/"+r.Name)
	}
	return names
}

// lastUpdate is when manager last wrote obj, by its managedFields.
func lastUpdate(obj *unstructured.Unstructured, manager string) time.Time {
	var last time.Time
	for _, f := range obj.GetManagedFields() {
		if f.Manager == manager && f.Time != nil && f.Time.After(last) {
			last = f.Time.Time
		}
	}
	return last
}

func nestedSlice(u *unstructured.Unstructured, path ...string) []map[string]any {
	items, _, _ := unstructured.NestedSlice(u.Object, path...)
	var out []map[string]any
	for _, i := range items {
		if m, ok := i.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func nestedMap(u *unstructured.Unstructured, path ...string) map[string]any {
	m, _, _ := unstructured.NestedMap(u.Object, path...)
	return m
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
