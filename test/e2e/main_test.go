//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// settings is what the environment chooses; the defaults fit the cluster of hack/local-cluster.sh.
type settings struct {
	root            string // the repository
	kubectl         string
	operatorImage   string // IMG of `make deploy`
	redisImage      string
	minioImage      string
	toolsImage      string // busybox: sh, find, stat, sha256sum, dd
	prometheusImage string // bin/prometheus (TestAlertsFireInARealPrometheus)
	storageClass    string // "" = static hostPath PersistentVolumes made by the tests
	hostPathDir     string // where those live on the node
	skipDeploy      bool
	artifacts       string // where failure dumps go
	operatorNS      string
	operatorPrefix  string
	managerSelector string
}

var (
	cfg     settings
	k8s     client.Client
	clients *kubernetes.Clientset
	ctx     = context.Background()
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// builtOperatorImage is the tag hack/images/build.sh gave the operator image it built last.
func builtOperatorImage(root string) string {
	ref, err := os.ReadFile(filepath.Join(root, "bin", "images", "operator.ref"))
	if err != nil {
		return "okgoes.local/okgoes-operator:e2e"
	}
	return strings.TrimSpace(string(ref))
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// The API server's warnings (e.g. a deprecated version the OLM suite creates objects at) go
	// through controller-runtime's logger: to stderr, instead of its "SetLogger was never called"
	// stack dump.
	log.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.InfoLevel)))
	root, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	cfg = settings{
		root:            root,
		kubectl:         env("E2E_KUBECTL", filepath.Join(root, "bin", "k8s", "kubectl")),
		operatorImage:   env("E2E_IMG", builtOperatorImage(root)),
		redisImage:      env("E2E_REDIS_IMAGE", "okgoes.local/redis:e2e"),
		minioImage:      env("E2E_MINIO_IMAGE", "okgoes.local/minio:e2e"),
		toolsImage:      env("E2E_TOOLS_IMAGE", "okgoes.local/tools:e2e"),
		prometheusImage: env("E2E_PROMETHEUS_IMAGE", "okgoes.local/prometheus:e2e"),
		storageClass:    os.Getenv("E2E_STORAGE_CLASS"),
		hostPathDir:     env("E2E_HOSTPATH_DIR", "/var/lib/okgoes-cluster/volumes"),
		skipDeploy:      os.Getenv("E2E_SKIP_DEPLOY") == "1" || os.Getenv("E2E_OLM") == "1", // OLM installs it (olm_test.go)
		artifacts:       env("E2E_ARTIFACTS", filepath.Join(root, "bin", "e2e-artifacts")),
		operatorNS:      "okgoes-system",
		operatorPrefix:  "okgoes-operator-",
		managerSelector: "control-plane=controller-manager",
	}
	if os.Getenv("E2E_OLM") == "1" {
		cfg.operatorNS = olmOperatorNS
	}
	if os.Getenv("KUBECONFIG") == "" {
		fmt.Fprintln(os.Stderr, "e2e: KUBECONFIG is not set: run `make test-e2e` (local cluster), or set KUBECONFIG to a cluster")
		return 1
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if k8s, err = client.New(restConfig, client.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if clients, err = kubernetes.NewForConfig(restConfig); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if !cfg.skipDeploy {
		if err := deploy(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: deploy:", err)
			dumpOperator(os.Stderr)
			return 1
		}
	}
	code := m.Run()
	cleanupScraper()
	return code
}

// deploy runs `make deploy IMG=...` as a user would. `make deploy` sets the image in
// config/manager/kustomization.yaml (kustomize edit); the file is put back as it was afterwards so
// that a test run leaves the work tree unchanged.
func deploy() error {
	kustomization := filepath.Join(cfg.root, "config", "manager", "kustomization.yaml")
	before, err := os.ReadFile(kustomization)
	if err != nil {
		return err
	}
	defer os.WriteFile(kustomization, before, 0o644) //nolint:errcheck // best effort; git shows it otherwise
	start := time.Now()
	// KUBECTL: the suite's own kubectl (E2E_KUBECTL, bin/k8s/kubectl), the version of the cluster,
	// whatever kubectl the machine has on PATH (which the Makefile would pick first).
	cmd := exec.Command("make", "-C", cfg.root, "deploy", "IMG="+cfg.operatorImage, "KUBECTL="+cfg.kubectl)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "e2e: make deploy IMG=%s took %s\n", cfg.operatorImage, time.Since(start).Round(time.Second))
	// The manager must be rolled out before any test starts: every test needs it.
	out, err := kubectl("-n", cfg.operatorNS, "rollout", "status", "deployment/"+cfg.operatorPrefix+"controller-manager", "--timeout=180s")
	if err != nil {
		return fmt.Errorf("manager rollout: %v\n%s", err, out)
	}
	return nil
}

// kubectl runs kubectl with the suite's KUBECONFIG and returns its combined output.
func kubectl(args ...string) (string, error) {
	return kubectlIn("", args...)
}

func kubectlIn(stdin string, args ...string) (string, error) {
	cmd := exec.Command(cfg.kubectl, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
