// Package testenv starts the real kube-apiserver and etcd that the controller tests run against
// (controller-runtime's envtest, with binaries built from source into bin/k8s by
// hack/envtest-assets.sh).
package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// RepoRoot is the directory holding the project's go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && !isToolModule(dir) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

func isToolModule(dir string) bool { return filepath.Base(filepath.Dir(dir)) == "tools" }

// StartEmpty starts an API server with no CRDs installed.
func StartEmpty(scheme *runtime.Scheme) (*envtest.Environment, *rest.Config, error) {
	return start(scheme, nil)
}

// Start starts an API server with the project's CRDs installed and returns it with a rest.Config
// for it. It fails, rather than skips, when the binaries are missing: run `make test`, which
// builds them first.
func Start(scheme *runtime.Scheme, extraCRDDirs ...string) (*envtest.Environment, *rest.Config, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, nil, err
	}
	return start(scheme, append([]string{filepath.Join(root, "config", "crd", "bases")}, extraCRDDirs...))
}

func start(scheme *runtime.Scheme, crdDirs []string) (*envtest.Environment, *rest.Config, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, nil, err
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "k8s")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, nil, fmt.Errorf("%s not found in %s: run `make test` (or hack/envtest-assets.sh) to build it: %w", bin, assets, err)
		}
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     crdDirs,
		ErrorIfCRDPathMissing: len(crdDirs) > 0,
		Scheme:                scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop() // a failed start (e.g. a CRD rejected) can leave etcd and the API server running
		return nil, nil, fmt.Errorf("start test API server: %w", err)
	}
	return env, cfg, nil
}

// WebhookServer serves webhooks where env pointed the API server: the conversion webhooks of the
// CRDs whose versions are convertible in the scheme env was started with.
func WebhookServer(env *envtest.Environment) webhook.Server {
	o := env.WebhookInstallOptions
	return webhook.NewServer(webhook.Options{Host: o.LocalServingHost, Port: o.LocalServingPort, CertDir: o.LocalServingCertDir})
}
