// Package upgrade is the upgrade story of docs/upgrades.md, played on a real API server with the
// real managers of each release, each built from its release commit and holding only its
// release's RBAC, then the current manager. CRDs are applied before the manager that needs them,
// as OLM does. The storage story (storage_upgrade_test.go) builds the
// 0.3.0 manager, the last without the kopia engine, from git and hands its PVCBackups to the
// current manager.
package upgrade

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	cachev1alpha1 "github.com/okgoes/okgoes-operator/api/cache/v1alpha1"
	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
)

const crdName = "rediscaches.cache.okgoes.com"

// The release commits the test builds managers from: each is the commit whose RBAC markers
// produced that release's CSV (hack/images/build.sh RELEASE_REFS names the same ones).
const (
	firstReleaseRef  = "682e361" // 0.1.0 (tag v0.1.0)
	secondReleaseRef = "bc21237" // 0.2.0
	// storageReleaseRef (storage_upgrade_test.go) is 0.3.0's.
	fourthReleaseRef = "df01528" // 0.4.0: spec.mode (Replication), the kopia engine
)

// managerUser is who the managers authenticate as.
const managerUser = "okgoes-operator"

type story struct {
	t       *testing.T
	ctx     context.Context
	root    string
	k8s     client.Client
	env     *envtest.Environment
	kubecfg string
	ns      string
}

func TestUpgradeStory(t *testing.T) {
	s := newStory(t, cachev1alpha1.AddToScheme, cachev1beta1.AddToScheme)

	done := step(t, "build the managers of 0.1.0 (git "+firstReleaseRef+"), 0.2.0 ("+secondReleaseRef+"), 0.3.0 ("+storageReleaseRef+"), 0.4.0 ("+fourthReleaseRef+") as their images are built, and the current one")
	oldBin := s.buildRelease("0.1.0", firstReleaseRef)
	bin020 := s.buildRelease("0.2.0", secondReleaseRef)
	bin030 := s.buildRelease("0.3.0", storageReleaseRef)
	bin040 := s.buildRelease("0.4.0", fourthReleaseRef)
	newBin := s.buildCurrent()
	done()

	done = step(t, "0.1.0: install its CRDs and manager; create caches at v1alpha1; they become Ready")
	s.applyCRDs("releases/0.1.0/manifests")
	old := s.startManager("0.1.0", "releases/0.1.0/manifests", oldBin)
	s.createAlpha("a", cachev1alpha1.EvictionAllKeysLFU)
	s.createAlpha("b", cachev1alpha1.EvictionVolatileTTL)
	a1 := s.waitReady("a", 1)
	s.waitReady("b", 1)
	podTemplateA := s.podTemplate("a")
	done()

	done = step(t, "0.2.0 CRDs applied first (v1beta1 served, storage v1alpha1, webhook not up yet): the 0.1.0 manager keeps working")
	s.applyCRDs("releases/0.2.0/manifests")
	s.patchAlphaPolicy("b", cachev1alpha1.EvictionNoEviction)
	s.waitReady("b", 2)
	s.createAlpha("d", cachev1alpha1.EvictionAllKeysRandom)
	s.waitReady("d", 1)
	done()

	done = step(t, "0.2.0 manager takes over (leader election): objects converge with nothing lost and no rollout")
	port := s.freePort()
	current := s.startManager("0.2.0", "releases/0.2.0/manifests", bin020, s.webhookArgs(port)...)
	old.stop()
	s.waitWebhook()
	aBeta := s.getBeta("a")
	if aBeta.Spec.Redis.Memory == nil || aBeta.Spec.Redis.Memory.EvictionPolicy != cachev1beta1.EvictionAllKeysLFU || aBeta.Spec.Redis.Memory.MaxMemory.String() != "100Mi" {
		t.Fatalf("a read at v1beta1 lost its eviction settings: %+v", aBeta.Spec.Redis)
	}
	if aBeta.Status.ObservedGeneration != a1.Status.ObservedGeneration || aBeta.Status.ConfigHash != a1.Status.ConfigHash {
		t.Fatalf("a recomputed on upgrade: observedGeneration %d -> %d, configHash %s -> %s",
			a1.Status.ObservedGeneration, aBeta.Status.ObservedGeneration, a1.Status.ConfigHash, aBeta.Status.ConfigHash)
	}
	// The new manager reconciles a (a touch of its label reaches it) and must not roll its pods.
	s.touch("a")
	s.consistently(3*time.Second, func() error {
		if got := s.podTemplate("a"); got != podTemplateA {
			return fmt.Errorf("the 0.2.0 manager changed the pod template of a (a rollout on upgrade)")
		}
		return nil
	})
	s.createBeta("c", 77)
	s.waitReady("c", 1)
	if got := s.getAlpha("c").Annotations[cachev1alpha1.HubOnlyAnnotation]; got != `{"maxClients":77}` {
		t.Fatalf("c read at v1alpha1: annotation %q", got)
	}
	if conf := s.redisConf("c"); !strings.Contains(conf, "maxclients 77\n") {
		t.Fatalf("c's redis.conf lacks maxclients:\n%s", conf)
	}
	s.patchAlphaPolicy("d", cachev1alpha1.EvictionVolatileLRU) // an old client still writes v1alpha1
	if got := s.waitReady("d", 2); got.Spec.Redis.Memory.EvictionPolicy != cachev1beta1.EvictionVolatileLRU {
		t.Fatalf("d after a v1alpha1 write: %+v", got.Spec.Redis.Memory)
	}
	done()

	done = step(t, "roll the manager back to 0.1.0 (0.2.0 CRDs stay): it still reconciles and keeps v1beta1-only fields")
	current.stop()
	old = s.startManager("0.1.0-rollback", "releases/0.1.0/manifests", oldBin)
	s.patchAlphaPolicy("a", cachev1alpha1.EvictionAllKeysLRU)
	s.waitReady("a", 2)
	s.patchAlphaPolicy("c", cachev1alpha1.EvictionVolatileRandom)
	s.waitReady("c", 2)
	if got := s.getAlpha("c").Annotations[cachev1alpha1.HubOnlyAnnotation]; got != `{"maxClients":77}` {
		t.Fatalf("c after the 0.1.0 manager wrote it: annotation %q (maxClients lost)", got)
	}
	done()

	done = step(t, "0.3.0 CRDs (storage v1beta1) first, then the 0.3.0 manager: stored objects migrated, storedVersions trimmed")
	s.applyCRDs("releases/0.3.0/manifests")
	port = s.freePort()
	current = s.startManager("0.3.0", "releases/0.3.0/manifests", bin030, s.webhookArgs(port)...)
	old.stop()
	s.waitWebhook()
	s.eventually(60*time.Second, func() error {
		crd := s.crd()
		if !slices.Equal(crd.Status.StoredVersions, []string{"v1beta1"}) {
			return fmt.Errorf("storedVersions %v", crd.Status.StoredVersions)
		}
		return nil
	})
	for _, name := range []string{"a", "b", "c", "d"} {
		s.waitReady(name, s.getBeta(name).Generation)
	}

	if c := s.getBeta("c"); c.Spec.Redis.MaxClients == nil || *c.Spec.Redis.MaxClients != 77 {
		t.Fatalf("c lost maxClients through the migration: %+v", c.Spec.Redis)
	}

	// The rollback's 0.1.0 manager rendered c without maxClients (it does not know the field);
	// 0.3.0 puts it back, and waitReady above cannot tell (c's observedGeneration did not move).
	// The templates 0.4.0 must keep are the ones 0.3.0 settled on, not a moment before.
	s.eventually(30*time.Second, func() error {
		if conf := s.redisConf("c"); !strings.Contains(conf, "maxclients 77\n") {
			return fmt.Errorf("the 0.3.0 manager has not rendered c's maxclients yet")
		}
		return nil
	})
	templates := s.settledTemplates("a", "b", "c", "d")
	done()

	done = step(t, "0.4.0 CRDs (spec.mode), then the 0.4.0 manager with its RBAC: caches created before read as Standalone and keep their pods")
	keepPods := func(what string) {
		for _, name := range []string{"a", "b", "c", "d"} {
			if m := s.getBeta(name).Spec.Mode; m != cachev1beta1.ModeStandalone {
				t.Fatalf("%s, created before spec.mode existed, reads as mode %q, want Standalone (the CRD default)", name, m)
			}
			s.touch(name)
		}
		s.consistently(3*time.Second, func() error {
			for name, tpl := range templates {
				if got := s.podTemplate(name); got != tpl {
					return fmt.Errorf("the pod template of %s changed when %s took over (a rollout on upgrade)", name, what)
				}
			}
			return nil
		})
	}
	s.applyCRDs("releases/0.4.0/manifests")
	port = s.freePort()
	// 0.4.0 holds the RBAC its CSV grants: it also watches StatefulSets and pods (Replication
	// mode), which no earlier release granted.
	next := s.startManager("0.4.0", "releases/0.4.0/manifests", bin040, s.webhookArgs(port)...)
	current.stop()
	current = next
	s.waitWebhook()
	keepPods("0.4.0")
	done()

	done = step(t, "the current CRDs, then the current manager with the RBAC it ships with (bundle/manifests): nothing rolls")
	s.applyCRDs("bundle/manifests")
	port = s.freePort()
	next = s.startManager("current", "bundle/manifests", newBin, s.webhookArgs(port)...)
	current.stop()
	current = next
	s.waitWebhook()
	keepPods("the current manager")
	done()

	done = step(t, "proof: a future release may now drop v1alpha1 entirely, and every object still reads")
	crd := s.crd()
	crd.Spec.Versions = slices.DeleteFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == "v1alpha1" })
	crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	if err := s.k8s.Update(s.ctx, crd); err != nil {
		t.Fatalf("dropping v1alpha1 after the migration: %v", err)
	}
	// Each object by name: a list can be answered from the watch cache, a get by name at the
	// latest revision decodes what etcd holds (an object still stored as v1alpha1 is "corrupt").
	want := map[string]cachev1beta1.EvictionPolicy{"a": "allkeys-lru", "b": "noeviction", "c": "volatile-random", "d": "volatile-lru"}
	for name, policy := range want {
		s.eventually(30*time.Second, func() error {
			rc := &cachev1beta1.RedisCache{}
			if err := s.k8s.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: name}, rc); err != nil {
				return err
			}
			if rc.Spec.Redis.Memory == nil || rc.Spec.Redis.Memory.EvictionPolicy != policy {
				return fmt.Errorf("%s: memory %+v, want policy %s", name, rc.Spec.Redis.Memory, policy)
			}
			return nil
		})
	}
	current.stop()
	done()
}

// newStory starts the API server (its client's scheme knows the types adds register) and the
// user the managers run as: one holding only what each release grants its ServiceAccount (see
// grant), so a permission a release forgot fails here, as it would under OLM.
func newStory(t *testing.T, adds ...func(*runtime.Scheme) error) *story {
	t.Helper()
	env, k8s, root := startAPIServer(t, adds...)
	user, err := env.AddUser(envtest.User{Name: managerUser}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubecfg := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubecfg, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return &story{t: t, ctx: context.Background(), root: root, k8s: k8s, env: env, kubecfg: kubecfg, ns: "default"}
}

// step logs the start of a step of a story and returns the function that logs its end and
// how long it took.
func step(t *testing.T, name string) func() {
	t.Helper()
	start := time.Now()
	t.Logf("step: %s", name)
	return func() {
		t.Helper()
		t.Logf("step done in %s: %s", time.Since(start).Round(time.Millisecond), name)
	}
}

// --- managers ---

type manager struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// buildRelease builds the manager of release version from its release commit ref as its image is
// built (hack/images/build.sh releases: the release's tree from git, a reproducible build, the
// image archive) and checks that image's digest is the one releases/digests.yaml pins (and the
// catalog names in relatedImages), when this is the toolchain the pins were made with. It
// returns the manager binary.
func (s *story) buildRelease(version, ref string) string {
	out := s.t.TempDir()
	cmd := exec.Command(filepath.Join(s.root, "hack", "images", "build.sh"), "releases")
	cmd.Env = append(os.Environ(), "IMAGES_OUT="+out, "RELEASE_REFS="+version+"="+ref)
	if b, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("build release %s (git %s): %v\n%s", version, ref, err, b)
	}
	s.checkReleaseDigest(version, filepath.Join(out, "operator-v"+version+".ref"))
	return filepath.Join(out, "manager-v"+version)
}

// checkReleaseDigest compares the manager image reference in refFile with the pin of version in
// releases/digests.yaml.
func (s *story) checkReleaseDigest(version, refFile string) {
	data, err := os.ReadFile(filepath.Join(s.root, "releases", "digests.yaml"))
	if err != nil {
		s.t.Fatal(err)
	}
	var pins struct {
		Toolchain string                       `json:"toolchain"`
		Releases  map[string]map[string]string `json:"releases"`
	}
	if err := yaml.Unmarshal(data, &pins); err != nil {
		s.t.Fatalf("releases/digests.yaml: %v", err)
	}
	want := pins.Releases[version]["manager"]
	if want == "" {
		s.t.Fatalf("releases/digests.yaml pins no manager image of %s (make release-digests)", version)
	}
	ref, err := os.ReadFile(refFile)
	if err != nil {
		s.t.Fatal(err)
	}
	got := strings.TrimSpace(string(ref))
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		s.t.Fatal(err)
	}
	if tc := strings.TrimSpace(string(goVersion)); tc != pins.Toolchain {
		s.t.Logf("the manager image of %s built with %s is %s; releases/digests.yaml pins %s, built with %s: not comparable", version, tc, got, want, pins.Toolchain)
		return
	}
	if got != want {
		s.t.Errorf("the manager image of %s built from its release commit is %s, releases/digests.yaml pins %s (and the catalog names it)", version, got, want)
	}
}

func (s *story) buildCurrent() string { return s.goBuild(s.root) }

// goBuild builds the operator image's programs of the tree in dir into one directory, as the
// image holds them: /manager, and /mover where the tree has cmd/mover (releases up to 0.3.0 ran
// their mover as `/manager mover`). It returns the manager's path.
func (s *story) goBuild(dir string) string {
	image := s.t.TempDir()
	pkgs := map[string]string{"manager": "."}
	if _, err := os.Stat(filepath.Join(dir, "cmd", "mover")); err == nil {
		pkgs["mover"] = "./cmd/mover"
	}
	for name, pkg := range pkgs {
		cmd := exec.Command("go", "build", "-o", filepath.Join(image, name), pkg)
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			s.t.Fatalf("go build %s in %s: %v\n%s", pkg, dir, err, b)
		}
	}
	return filepath.Join(image, "manager")
}

func (s *story) webhookArgs(port string) []string {
	return []string{"--webhook-certs=self-signed", "--webhook-port=" + port,
		"--webhook-url=https://localhost:" + port + "/convert", "--webhook-cert-dir=" + s.t.TempDir()}
}

// startManager runs bin as the manager called name, holding the RBAC of the CSV in manifests (a
// directory of the repository: a release's, or bundle/manifests for the current manager).
func (s *story) startManager(name, manifests, bin string, extra ...string) *manager {
	s.grant(manifests, slices.Contains(extra, "--webhook-certs=self-signed"))
	m := &manager{t: s.t, name: name, log: filepath.Join(s.t.TempDir(), name+".log"), done: make(chan struct{})}
	logFile, err := os.Create(m.log)
	if err != nil {
		s.t.Fatal(err)
	}
	args := append([]string{"--leader-elect", "--leader-election-namespace=" + s.ns, "--metrics-bind-address=0",
		"--health-probe-bind-address=0", "--mover-image=example.org/okgoes-operator:test"}, extra...)
	m.cmd = exec.Command(bin, args...)
	m.cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubecfg, "POD_NAMESPACE="+s.ns)
	m.cmd.Stdout, m.cmd.Stderr = logFile, logFile
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() { _ = m.cmd.Wait(); logFile.Close(); close(m.done) }()
	s.t.Cleanup(func() {
		m.stop()
		if s.t.Failed() {
			b, _ := os.ReadFile(m.log)
			s.t.Logf("--- log of manager %s ---\n%s", name, tail(b, 60))
		}
	})
	return m
}

// stop sends SIGTERM (the manager releases its lease on the way out) and waits.
func (m *manager) stop() {
	select {
	case <-m.done:
		return
	default:
	}
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		<-m.done
	}
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// grant gives managerUser exactly the permissions of a release: the clusterPermissions and
// permissions of the CSV in manifests (what OLM grants the ServiceAccount), plus, for a manager
// that makes its own webhook certificate, the rules of config/webhook (what make deploy adds). It
// replaces whatever an earlier release granted.
func (s *story) grant(manifests string, selfSigned bool) {
	data, err := os.ReadFile(filepath.Join(s.root, manifests, "okgoes-operator.clusterserviceversion.yaml"))
	if err != nil {
		s.t.Fatal(err)
	}
	var csv struct {
		Spec struct {
			Install struct {
				Spec struct {
					ClusterPermissions []struct{ Rules []rbacv1.PolicyRule } `json:"clusterPermissions"`
					Permissions        []struct{ Rules []rbacv1.PolicyRule } `json:"permissions"`
				} `json:"spec"`
			} `json:"install"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &csv); err != nil {
		s.t.Fatal(err)
	}
	var cluster, namespaced []rbacv1.PolicyRule
	for _, p := range csv.Spec.Install.Spec.ClusterPermissions {
		cluster = append(cluster, p.Rules...)
	}
	for _, p := range csv.Spec.Install.Spec.Permissions {
		namespaced = append(namespaced, p.Rules...)
	}
	if selfSigned {
		data, err := os.ReadFile(filepath.Join(s.root, "config", "webhook", "cert_role.yaml"))
		if err != nil {
			s.t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			var role rbacv1.ClusterRole // a Role has the same shape
			if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
				s.t.Fatal(err)
			}
			switch role.Kind {
			case "ClusterRole":
				cluster = append(cluster, role.Rules...)
			case "Role":
				namespaced = append(namespaced, role.Rules...)
			}
		}
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: managerUser}}
	for _, r := range []struct {
		name  string
		rules []rbacv1.PolicyRule
		bind  client.Object
	}{
		{"okgoes-operator-cluster", cluster, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "okgoes-operator-cluster"},
			Subjects: subject, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "okgoes-operator-cluster"}}},
		{"okgoes-operator-namespaced", namespaced, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "okgoes-operator", Namespace: s.ns},
			Subjects: subject, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "okgoes-operator-namespaced"}}},
	} {
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: r.name}}
		if _, err := controllerutil.CreateOrUpdate(s.ctx, s.k8s, role, func() error { role.Rules = r.rules; return nil }); err != nil {
			s.t.Fatal(err)
		}
		if err := s.k8s.Create(s.ctx, r.bind); err != nil && !apierrors.IsAlreadyExists(err) {
			s.t.Fatal(err)
		}
	}
	s.t.Logf("granted the RBAC of %s (self-signed webhook: %v): %d cluster rules, %d namespaced", manifests, selfSigned, len(cluster), len(namespaced))
}

// --- the API server side ---

// applyCRDs applies the CRDs of a release's manifests over the installed ones, as OLM does.
func (s *story) applyCRDs(dir string) {
	paths, err := filepath.Glob(filepath.Join(s.root, dir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		s.t.Fatalf("no manifests in %s: %v", dir, err)
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			s.t.Fatal(err)
		}
		if !bytes.Contains(data, []byte("kind: CustomResourceDefinition")) {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			s.t.Fatalf("%s: %v", p, err)
		}
		crds = append(crds, crd)
	}
	for _, crd := range crds {
		existing := &apiextensionsv1.CustomResourceDefinition{}
		err := s.k8s.Get(s.ctx, types.NamespacedName{Name: crd.Name}, existing)
		switch {
		case err == nil:
			crd.ResourceVersion = existing.ResourceVersion
			// The manager of the running release keeps the caBundle/URL up to date; OLM would
			// point it at its Service. Keep what is there until the next manager repoints it.
			if crd.Spec.Conversion != nil && existing.Spec.Conversion != nil && existing.Spec.Conversion.Webhook != nil {
				crd.Spec.Conversion.Webhook.ClientConfig = existing.Spec.Conversion.Webhook.ClientConfig
			}
			err = s.k8s.Update(s.ctx, crd)
		default:
			err = s.k8s.Create(s.ctx, crd)
		}
		if err != nil {
			s.t.Fatalf("apply CRD %s from %s: %v", crd.Name, dir, err)
		}
	}
	if err := envtest.WaitForCRDs(s.env.Config, crds, envtest.CRDInstallOptions{MaxTime: 30 * time.Second, PollInterval: 100 * time.Millisecond}); err != nil {
		s.t.Fatal(err)
	}
}

func (s *story) crd() *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := s.k8s.Get(s.ctx, types.NamespacedName{Name: crdName}, crd); err != nil {
		s.t.Fatal(err)
	}
	return crd
}

// waitWebhook waits until a v1beta1 read (a conversion, while storage is v1alpha1) works.
func (s *story) waitWebhook() {
	s.eventually(60*time.Second, func() error {
		return s.k8s.List(s.ctx, &cachev1beta1.RedisCacheList{}, client.InNamespace(s.ns))
	})
}

func (s *story) createAlpha(name string, policy cachev1alpha1.EvictionPolicy) {
	max := resource.MustParse("100Mi")
	rc := &cachev1alpha1.RedisCache{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: cachev1alpha1.RedisCacheSpec{
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}},
			Eviction:  &cachev1alpha1.Eviction{Policy: policy, MaxMemory: &max},
		}}
	if err := s.k8s.Create(s.ctx, rc); err != nil {
		s.t.Fatalf("create %s at v1alpha1: %v", name, err)
	}
}

func (s *story) createBeta(name string, maxClients int32) {
	rc := &cachev1beta1.RedisCache{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: cachev1beta1.RedisCacheSpec{Redis: cachev1beta1.Redis{MaxClients: &maxClients,
			Memory: &cachev1beta1.Memory{EvictionPolicy: cachev1beta1.EvictionAllKeysLRU}}}}
	if err := s.k8s.Create(s.ctx, rc); err != nil {
		s.t.Fatalf("create %s at v1beta1: %v", name, err)
	}
}

func (s *story) getAlpha(name string) *cachev1alpha1.RedisCache {
	rc := &cachev1alpha1.RedisCache{}
	if err := s.k8s.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: name}, rc); err != nil {
		s.t.Fatal(err)
	}
	return rc
}

func (s *story) getBeta(name string) *cachev1beta1.RedisCache {
	rc := &cachev1beta1.RedisCache{}
	if err := s.k8s.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: name}, rc); err != nil {
		s.t.Fatal(err)
	}
	return rc
}

func (s *story) patchAlphaPolicy(name string, policy cachev1alpha1.EvictionPolicy) {
	rc := &cachev1alpha1.RedisCache{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name}}
	patch := fmt.Sprintf(`{"spec":{"eviction":{"policy":%q}}}`, policy)
	if err := s.k8s.Patch(s.ctx, rc, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		s.t.Fatalf("patch %s at v1alpha1: %v", name, err)
	}
}

// touch changes a label of the cache's Deployment, which the controller watches, so that
// whichever manager leads reconciles the cache.
func (s *story) touch(name string) {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name}}
	patch := fmt.Sprintf(`{"metadata":{"labels":{"upgrade-test/touched":"%d"}}}`, time.Now().UnixNano())
	if err := s.k8s.Patch(s.ctx, dep, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		s.t.Fatal(err)
	}
}

// waitReady plays the Deployment controller (envtest runs none) until the cache is Ready with
// status.observedGeneration == generation, and returns it. It reads at v1alpha1 (the version
// every manager and CRD of the story serve) and converts locally, so it works while no
// conversion webhook runs.
func (s *story) waitReady(name string, generation int64) *cachev1beta1.RedisCache {
	var got *cachev1beta1.RedisCache
	s.eventually(60*time.Second, func() error {
		dep := &appsv1.Deployment{}
		if err := s.k8s.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: name}, dep); err != nil {
			return err
		}
		n := *dep.Spec.Replicas
		if dep.Status.ObservedGeneration != dep.Generation || dep.Status.ReadyReplicas != n {
			dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: n, UpdatedReplicas: n,
				ReadyReplicas: n, AvailableReplicas: n}
			if err := s.k8s.Status().Update(s.ctx, dep); err != nil {
				return err
			}
		}
		alpha := &cachev1alpha1.RedisCache{}
		if err := s.k8s.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: name}, alpha); err != nil {
			return err
		}
		got = &cachev1beta1.RedisCache{}
		if err := alpha.ConvertTo(got); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, cachev1beta1.ConditionReady)
		if got.Generation != generation || got.Status.ObservedGeneration != generation || ready == nil || ready.Status != metav1.ConditionTrue {
			return fmt.Errorf("%s: generation %d (want %d), observedGeneration %d, Ready %+v", name, got.Generation, generation,
				got.Status.ObservedGeneration, ready)
		}
		return nil
	})
	return got
}

func (s *story) podTemplate(name string) string {
	dep := &appsv1.Deployment{}
	if err := s.k8s.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: name}, dep); err != nil {
		s.t.Fatal(err)
	}
	b, err := yaml.Marshal(dep.Spec.Template)
	if err != nil {
		s.t.Fatal(err)
	}
	return string(b)
}

// settledTemplates returns the pod templates of the named caches' Deployments once two reads 2 s
// apart agree: no manager is still changing them.
func (s *story) settledTemplates(names ...string) map[string]string {
	read := func() map[string]string {
		out := map[string]string{}
		for _, name := range names {
			out[name] = s.podTemplate(name)
		}
		return out
	}
	var got map[string]string
	s.eventually(60*time.Second, func() error {
		first := read()
		time.Sleep(2 * time.Second)
		got = read()
		if !maps.Equal(first, got) {
			return fmt.Errorf("the pod templates still change")
		}
		return nil
	})
	return got
}

func (s *story) redisConf(name string) string {
	var conf string
	s.eventually(30*time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := s.k8s.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: name + "-config"}, cm); err != nil {
			return err
		}
		conf = cm.Data["redis.conf"]
		return nil
	})
	return conf
}

func (s *story) freePort() string {
	l, err := listenLoopback()
	if err != nil {
		s.t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := strings.Cut(l.Addr().String(), ":")
	return port
}

func (s *story) eventually(timeout time.Duration, cond func() error) {
	s.t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	}); err != nil {
		s.t.Fatalf("not within %s: %v", timeout, last)
	}
}

// consistently checks cond every 100ms for d; the first error fails the test.
func (s *story) consistently(d time.Duration, cond func() error) {
	s.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if err := cond(); err != nil {
			s.t.Fatal(err)
		}
	}
}

func listenLoopback() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
