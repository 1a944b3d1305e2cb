// Package storagetest is what the tests of the storage controllers (pvcbackup, pvcrestore) share:
// one real API server (envtest, with the VolumeSnapshot CRDs of the external-snapshotter module),
// a real MinIO per story (internal/testenv), the kubelet and Job controller stand-ins that run the
// real mover code for a Job and write the Job's and pod's status, and the fixtures of a story
// (World). Envtest runs no controller: a story drives Reconcile directly with a FakeClock, so time
// moves when the test says.
//
// It imports neither controller package, so both can use it from their own (internal) tests; a
// World drives PVCBackups through the reconciler its Backups func returns.
package storagetest

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

	groupsnapshotv1beta2 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1beta2"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/mover/run"
	"github.com/okgoes/okgoes-operator/internal/testenv"
)

// The API server of a test binary, set by Main before the tests run.
var (
	Scheme = runtime.NewScheme()
	Cfg    *rest.Config
	K8s    client.Client
	Ctx    = context.Background()
)

// EnvMoverChild makes a test binary the backup mover (Main), for a story that kills it
// (World.KillBackupMidUpload).
const EnvMoverChild = "STORAGE_TEST_MOVER_CHILD"

// Main is the TestMain of a storage controller package: the mover process of a story when
// EnvMoverChild is set; otherwise it starts the API server, calls ready (the package picks up Cfg
// and K8s), runs the tests and stops the API server.
func Main(m *testing.M, ready func()) {
	if os.Getenv(EnvMoverChild) != "" { // the mover process of a story (KillBackupMidUpload)
		res := run.Backup(context.Background(), os.Getenv, "test")
		fmt.Println(res.Message)
		os.Exit(0)
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.WarnLevel)))
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, storagev1.AddToScheme, snapshotv1.AddToScheme, groupsnapshotv1beta2.AddToScheme} {
		if err := add(Scheme); err != nil {
			panic(err)
		}
	}
	crds, err := SnapshotCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	env, c, err := testenv.Start(Scheme, crds...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	Cfg = c
	K8s, err = client.New(Cfg, client.Options{Scheme: Scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ready()
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// SnapshotCRDs are the VolumeSnapshot and VolumeGroupSnapshot CRDs shipped in the external-snapshotter client module the
// operator compiles against.
func SnapshotCRDs() ([]string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kubernetes-csi/external-snapshotter/client/v8").Output()
	if err != nil {
		return nil, fmt.Errorf("locate external-snapshotter module: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd")
	var files []string
	for _, kind := range []string{"volumesnapshotclasses", "volumesnapshotcontents", "volumesnapshots"} {
		files = append(files, filepath.Join(dir, "snapshot.storage.k8s.io_"+kind+".yaml"))
	}
	for _, kind := range []string{"volumegroupsnapshotclasses", "volumegroupsnapshotcontents", "volumegroupsnapshots"} {
		files = append(files, filepath.Join(dir, "groupsnapshot.storage.k8s.io_"+kind+".yaml"))
	}
	return files, nil
}

// FakeClock is the injected clock the stories move by hand.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// Now is the time the story set last.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
