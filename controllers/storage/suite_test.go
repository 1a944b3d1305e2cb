package storage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/testenv"
)

// The PVCBackup stories run against one real API server (with the VolumeSnapshot CRDs of the
// external-snapshotter module loaded) and a real MinIO per test. Most stories drive Reconcile
// directly with a fake clock, so that time moves when the test says; the test plays the kubelet
// by running the real mover code for each Job and writing the Job's status.
var (
	scheme  = runtime.NewScheme()
	cfg     *rest.Config
	k8s     client.Client
	testCtx = context.Background()
)

func TestMain(m *testing.M) {
	if os.Getenv(envMoverChild) != "" { // the mover process of a story (startMoverProcess)
		res := mover.RunBackup(context.Background(), os.Getenv, "test")
		fmt.Println(res.Message)
		os.Exit(0)
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.WarnLevel)))
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, storagev1.AddToScheme, snapshotv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	crds, err := snapshotCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	env, c, err := testenv.Start(scheme, crds...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cfg = c
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// snapshotCRDs are the VolumeSnapshot CRDs shipped in the external-snapshotter client module the
// operator compiles against.
func snapshotCRDs() ([]string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kubernetes-csi/external-snapshotter/client/v8").Output()
	if err != nil {
		return nil, fmt.Errorf("locate external-snapshotter module: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd")
	var files []string
	for _, kind := range []string{"volumesnapshotclasses", "volumesnapshotcontents", "volumesnapshots"} {
		files = append(files, filepath.Join(dir, "snapshot.storage.k8s.io_"+kind+".yaml"))
	}
	return files, nil
}

// fakeClock is the injected clock the stories move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
