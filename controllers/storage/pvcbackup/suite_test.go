package pvcbackup

import (
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// The stories run against the one API server of storagetest.Main and a MinIO per story
// (storagetest.World).
var (
	scheme  = storagetest.Scheme
	testCtx = storagetest.Ctx
	cfg     *rest.Config
	k8s     client.Client
)

func TestMain(m *testing.M) {
	storagetest.Main(m, func() { cfg, k8s = storagetest.Cfg, storagetest.K8s })
}

// world is a storagetest.World whose PVCBackups are reconciled by r.
type world struct {
	*storagetest.World
	r *PVCBackupReconciler
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{World: storagetest.NewWorld(t)}
	w.r = &PVCBackupReconciler{Client: k8s, Deps: w.Deps(k8s), SnapshotsAvailable: true}
	w.Backups = func() reconcile.Reconciler { return w.r }
	return w
}
