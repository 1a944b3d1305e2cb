package checks

// The local run of the cluster tests: a real kube-apiserver and etcd (envtest, binaries from
// bin/k8s), the bundle's CRDs installed as OLM would install them, the operator's manager built
// from this checkout and run as a process, and the tests run as a user holding only
// scorecard/rbac.yaml. envtest runs no kubelet and no Deployment controller, so the harness
// writes Deployment status the way they would; the tests themselves know nothing of that.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	scapi "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/okgoes/okgoes-operator/scorecard/internal/bundle"
)

// scorecardUser is who the tests run as; it holds scorecard/rbac.yaml in each test namespace.
const scorecardUser = "okgoes-scorecard"

type cluster struct {
	t          *testing.T
	root       string
	env        *envtest.Environment
	admin      *kubernetes.Clientset
	adminDyn   dynamic.Interface
	user       dynamic.Interface // as scorecardUser
	userConfig string            // kubeconfig file of scorecardUser
	adminKC    string            // kubeconfig file of an admin, for the manager
	bundle     *bundle.Bundle
}

func TestLocalScorecard(t *testing.T) {
	c := startCluster(t)

	// Without the operator: samples-ready must report fail within its bounded timeout (the
	// v1alpha1 example cannot even be created: the CRD's conversion webhook is the operator),
	// and leave nothing behind.
	t.Run("samples-ready fails without the operator", func(t *testing.T) {
		ns := c.namespace("no-operator")
		start := time.Now()
		res := c.run(t, "samples-ready", ns, 4*time.Second)
		elapsed := time.Since(start)
		if res.State != scapi.FailState {
			t.Fatalf("state %s, want fail", res.State)
		}
		if elapsed < 4*time.Second || elapsed > 30*time.Second {
			t.Errorf("took %s; want the 4s timeout to bound it", elapsed)
		}
		wantErr := []string{
			"RedisCache v1alpha1/rediscache-sample: create in namespace " + ns, // conversion webhook not served
			"RedisCache v1beta1/rediscache-sample-v1beta1: not reconciled within 4s",
			"PVCBackup v1/pvcbackup-sample: not reconciled within 4s",
			"PVCRestore v1/pvcrestore-sample: not reconciled within 4s",
		}
		for _, w := range wantErr {
			if !containsPrefix(res.Errors, w) {
				t.Errorf("no error starting %q in:\n%s", w, strings.Join(res.Errors, "\n"))
			}
		}
		c.assertEmpty(t, ns)
	})
	t.Run("invalid-rejected fails without the operator", func(t *testing.T) {
		ns := c.namespace("no-operator-invalid")
		res := c.run(t, "invalid-rejected", ns, 0)
		if res.State != scapi.FailState || !containsPrefix(res.Errors, "RedisCache v1alpha1/rediscache-sample: the example itself is rejected") {
			t.Fatalf("state %s, errors:\n%s", res.State, strings.Join(res.Errors, "\n"))
		}
	})

	c.startManager()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go c.playDeploymentController(ctx)

	t.Run("samples-ready", func(t *testing.T) {
		ns := c.namespace("samples-ready")
		if res := c.run(t, "samples-ready", ns, time.Minute); res.State != scapi.PassState {
			t.Fatalf("state %s, errors:\n%s", res.State, strings.Join(res.Errors, "\n"))
		}
		c.assertEmpty(t, ns)
	})
	t.Run("invalid-rejected", func(t *testing.T) {
		ns := c.namespace("invalid-rejected")
		res := c.run(t, "invalid-rejected", ns, 0)
		if res.State != scapi.PassState {
			t.Fatalf("state %s, errors:\n%s", res.State, strings.Join(res.Errors, "\n"))
		}
		for _, w := range []string{
			"RedisCache v1alpha1/rediscache-sample: spec.replicas = -1 (minimum 0): rejected",
			"RedisCache v1alpha1/rediscache-sample: spec.eviction.policy = lru (CEL rule): rejected",
			"RedisCache v1beta1/rediscache-sample-v1beta1: spec.redis.memory.maxMemory = 512Ki (CEL rule): rejected",
			"PVCBackup v1/pvcbackup-sample: spec.schedule = every night at two (CEL rule): rejected",
			"PVCRestore v1/pvcrestore-sample: spec.source breaking \"set exactly one of source.pvcBackup and source.s3\" (CEL rule): rejected",
		} {
			if !strings.Contains(res.Log, w) {
				t.Errorf("log has no %q", w)
			}
		}
		c.assertEmpty(t, ns)
	})
	// The binary, as scorecard runs it in a pod: flags, environment, JSON on stdout, exit 0.
	t.Run("okgoes-scorecard binary", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "okgoes-scorecard")
		goBuild(t, filepath.Join(c.root, "scorecard"), bin, "./cmd/okgoes-scorecard")
		ns := c.namespace("binary")
		for _, test := range []string{"samples-ready", "descriptors-cover-samples"} {
			cmd := exec.Command(bin, test, "--bundle", filepath.Join(c.root, "bundle"), "--timeout", "1m")
			cmd.Env = append(os.Environ(), "KUBECONFIG="+c.userConfig, "SCORECARD_NAMESPACE="+ns)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s: %v\nstderr: %s", test, err, stderr.String())
			}
			if stderr.Len() > 0 {
				t.Errorf("%s wrote to stderr, which scorecard reads as part of the result: %s", test, stderr.String())
			}
			var st scapi.TestStatus
			dec := json.NewDecoder(&stdout)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&st); err != nil {
				t.Fatalf("%s: stdout is not a TestStatus: %v", test, err)
			}
			if len(st.Results) != 1 || st.Results[0].Name != test || st.Results[0].State != scapi.PassState {
				t.Fatalf("%s: %+v", test, st)
			}
		}
		c.assertEmpty(t, ns)
	})
}

// run runs one test as scorecardUser in ns.
func (c *cluster) run(t *testing.T, name, ns string, timeout time.Duration) scapi.TestResult {
	t.Helper()
	test := Find(name)
	start := time.Now()
	res := test.Run(context.Background(), &Env{Bundle: c.bundle, Client: c.user, Namespace: ns, Timeout: timeout, Poll: 200 * time.Millisecond})
	t.Logf("%s in %s: %s after %s\n%s", name, ns, res.State, time.Since(start).Round(time.Millisecond), res.Log)
	return res
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// assertEmpty: no custom resource of the operator is left in ns.
func (c *cluster) assertEmpty(t *testing.T, ns string) {
	t.Helper()
	for _, s := range c.bundle.Samples {
		gvr, err := c.bundle.Resource(s)
		if err != nil {
			t.Fatal(err)
		}
		list, err := c.adminDyn.Resource(gvr).Namespace(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range list.Items {
			t.Errorf("left behind in %s: %s %s", ns, item.GetKind(), item.GetName())
		}
	}
}

// --- the cluster ---

func startCluster(t *testing.T) *cluster {
	root := repoRoot(t)
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "k8s")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			t.Fatalf("%s not found in %s: run `make test` (or `make k8s-assets`) to build it: %v", bin, assets, err)
		}
	}
	b, err := bundle.Load(filepath.Join(root, "bundle"))
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		t.Fatalf("start the API server: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	// As OLM installs them: unchanged (envtest's own CRD installation would drop the conversion
	// webhook of kinds it does not know).
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join(root, "bundle", "manifests")}, ErrorIfPathMissing: true}); err != nil {
		t.Fatalf("install the bundle's CRDs: %v", err)
	}
	c := &cluster{t: t, root: root, env: env, bundle: b}
	c.admin = kubernetes.NewForConfigOrDie(cfg)
	c.adminDyn = dynamic.NewForConfigOrDie(cfg)
	c.adminKC = c.kubeconfig(envtest.User{Name: "okgoes-operator", Groups: []string{"system:masters"}})
	c.userConfig = c.kubeconfig(envtest.User{Name: scorecardUser})

	data, err := os.ReadFile(filepath.Join(root, "scorecard", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatalf("scorecard/rbac.yaml: %v", err)
	}
	if _, err := c.admin.RbacV1().ClusterRoles().Create(context.Background(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ucfg, err := env.AddUser(envtest.User{Name: scorecardUser}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.user = dynamic.NewForConfigOrDie(clientConfig(ucfg.Config()))
	return c
}

// clientConfig is set up as the okgoes-scorecard binary sets up its own.
func clientConfig(cfg *rest.Config) *rest.Config {
	cfg.WarningHandler = rest.NoWarnings{}
	cfg.QPS, cfg.Burst = 50, 100
	return cfg
}

func (c *cluster) kubeconfig(u envtest.User) string {
	au, err := c.env.AddUser(u, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	data, err := au.KubeConfig()
	if err != nil {
		c.t.Fatal(err)
	}
	path := filepath.Join(c.t.TempDir(), u.Name+".kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		c.t.Fatal(err)
	}
	return path
}

// namespace creates a namespace for one test and lets scorecardUser work in it with the
// ClusterRole of scorecard/rbac.yaml, and nothing else.
func (c *cluster) namespace(prefix string) string {
	ctx := context.Background()
	ns, err := c.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "okgoes-scorecard", Namespace: ns.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "okgoes-scorecard"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: scorecardUser}},
	}
	if _, err := c.admin.RbacV1().RoleBindings(ns.Name).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	// The authorizer learns of the binding through its informers: wait until it allows.
	for _, s := range c.bundle.Samples {
		gvr, err := c.bundle.Resource(s)
		if err != nil {
			c.t.Fatal(err)
		}
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: scorecardUser,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns.Name, Verb: "create", Group: gvr.Group, Resource: gvr.Resource}}}
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			res, err := c.admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			return err == nil && res.Status.Allowed, nil
		})
		if err != nil {
			c.t.Fatalf("%s may not create %s in %s: %v", scorecardUser, gvr.Resource, ns.Name, err)
		}
	}
	return ns.Name
}

// --- the operator ---

// startManager builds the manager from this checkout and runs it against the API server, with
// the self-signed conversion webhook `make run` uses, until the test ends; it returns once the
// webhook converts.
func (c *cluster) startManager() {
	t := c.t
	start := time.Now()
	bin := filepath.Join(t.TempDir(), "manager")
	goBuild(t, c.root, bin, ".")
	port := freePort(t)
	logPath := filepath.Join(t.TempDir(), "manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--mover-image=example.org/okgoes-operator:scorecard",
		"--webhook-certs=self-signed", "--webhook-port="+port, "--webhook-url=https://localhost:"+port+"/convert",
		"--webhook-cert-dir="+t.TempDir())
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.adminKC, "POD_NAMESPACE=default")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("--- manager log (last 80 lines) ---\n%s", tail(logPath, 80))
		}
	})
	// Ready when the example at the old version converts (a dry run, as cluster-admin).
	var sample = c.bundle.Samples[0].DeepCopy()
	sample.SetNamespace("default")
	gvr, err := c.bundle.Resource(sample)
	if err != nil {
		t.Fatal(err)
	}
	var last error
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-done:
			return false, fmt.Errorf("the manager exited")
		default:
		}
		_, last = c.adminDyn.Resource(gvr).Namespace("default").Create(ctx, sample, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("manager not serving conversions: %v (last: %v)\n%s", err, last, tail(logPath, 80))
	}
	t.Logf("manager built and serving in %s", time.Since(start).Round(time.Millisecond))
}

// playDeploymentController does for every Deployment what the Deployment controller and the
// kubelets would once its pods are ready: status reports spec.replicas updated, ready and
// available replicas of the current generation.
func (c *cluster) playDeploymentController(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := c.admin.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i := range list.Items {
			d := &list.Items[i]
			n := int32(1)
			if d.Spec.Replicas != nil {
				n = *d.Spec.Replicas
			}
			want := appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
			if d.Status.ObservedGeneration == want.ObservedGeneration && d.Status.ReadyReplicas == n &&
				d.Status.UpdatedReplicas == n && d.Status.AvailableReplicas == n && d.Status.Replicas == n {
				continue
			}
			d.Status = want
			_, _ = c.admin.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
		}
		return false, nil
	})
}

// --- helpers ---

// repoRoot is the operator's repository: the directory above whose go.mod is the operator's.
func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.Contains(string(data), "module github.com/okgoes/okgoes-operator\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("the operator's go.mod is not above the working directory")
		}
		dir = parent
	}
}

func goBuild(t *testing.T, dir, out, pkg string) {
	t.Helper()
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s in %s: %v\n%s", pkg, dir, err, b)
	}
	t.Logf("go build %s in %s: %s", pkg, dir, time.Since(start).Round(time.Millisecond))
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
