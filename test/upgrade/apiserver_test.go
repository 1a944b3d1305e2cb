package upgrade

import (
	"testing"

	"go.uber.org/zap/zapcore"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/okgoes/okgoes-operator/internal/testenv"
)

// startAPIServer starts an API server with no CRDs, stopped when the test ends, as OLM finds a
// cluster before it installs anything: each story applies the CRDs of the release it plays. It
// returns the server, a client whose scheme knows the built-in types, CRDs and the types adds
// register, and the repository root the stories read manifests and releases from.
func startAPIServer(t *testing.T, adds ...func(*runtime.Scheme) error) (*envtest.Environment, client.Client, string) {
	t.Helper()
	// envtest's own log (WaitForCRDs): warnings and errors only, and no "SetLogger was never
	// called" stack trace in the test output.
	log.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.WarnLevel)))
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme}, adds...) {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	env, cfg, err := testenv.StartEmpty(runtime.NewScheme())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return env, k8s, root
}
