package backupcatalog

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/pvcbackup"
	"github.com/okgoes/okgoes-operator/controllers/storage/pvcrestore"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// The stories run against the one API server of storagetest.Main and a MinIO per story
// (storagetest.World); the PVCBackups that write the backups and the PVCRestores that read them
// back are driven by their own real reconcilers and the real mover.
var (
	testCtx = storagetest.Ctx
	k8s     client.Client
)

func TestMain(m *testing.M) {
	storagetest.Main(m, func() { k8s = storagetest.K8s })
}

// world is a storagetest.World whose PVCBackups are reconciled by the PVCBackup reconciler.
type world struct {
	*storagetest.World
	// stores, when set, opens the catalog's stores (a story's wrapper around the real MinIO one).
	stores storagekit.StoreFactory
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{World: storagetest.NewWorld(t)}
	r := &pvcbackup.PVCBackupReconciler{Client: k8s, Deps: w.Deps(k8s), SnapshotsAvailable: true}
	w.Backups = func() reconcile.Reconciler { return r }
	return w
}

// namespace creates another namespace sharing the world's MinIO and clock, with the credentials
// Secret s3-creds (data; the world's keys and kopia password when nil) and a PVC "data": another
// team's namespace, or a fresh cluster's.
func (w *world) namespace(prefix string, data map[string]string) *world {
	w.T.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	w.Must(k8s.Create(testCtx, ns))
	other := *w.World
	other.NS = ns.Name
	if data == nil {
		data = map[string]string{"AWS_ACCESS_KEY_ID": w.MinIO.AccessKey, "AWS_SECRET_ACCESS_KEY": w.MinIO.SecretKey,
			storagev1.DefaultRepositoryPasswordKey: "correct horse battery staple"}
	}
	other.Secret("s3-creds", data)
	w.Must(k8s.Create(testCtx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}))
	return &world{World: &other}
}

// backupNow makes one manual backup of dir with the PVCBackup pb and returns pb as it is after.
func (w *world) backupNow(pb *storagev1.PVCBackup, dir string) *storagev1.PVCBackup {
	w.T.Helper()
	w.StartManual(pb, "once")
	job := w.Job(pb)
	res := w.RunMover(job, dir)
	if !res.Succeeded() {
		w.T.Fatalf("backup: %+v", res)
	}
	w.FinishPod(job, res)
	w.FinishJob(job, true)
	w.Reconcile(pb)
	if pb.Status.LastRun == nil || pb.Status.LastRun.Result != storagev1.RunSucceeded {
		w.T.Fatalf("backup did not succeed: %+v", pb.Status.LastRun)
	}
	return pb
}

// catalog creates a BackupCatalog of the world's bucket in the world's namespace, with the
// credentials Secret s3-creds.
func (w *world) catalog(name string, edits ...func(*storagev1.BackupCatalog)) *storagev1.BackupCatalog {
	w.T.Helper()
	bc := &storagev1.BackupCatalog{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: name},
		Spec: storagev1.BackupCatalogSpec{Bucket: storagetest.Bucket, Location: storagev1.S3Location{
			Endpoint: w.MinIO.Endpoint, Insecure: true, CredentialsSecretRef: storagev1.CredentialsSecretRef{Name: "s3-creds"}}}}
	for _, edit := range edits {
		edit(bc)
	}
	w.Must(k8s.Create(testCtx, bc))
	return bc
}

// reconcileCatalog reconciles bc once (a reconcile error fails the story) and reads it back.
func (w *world) reconcileCatalog(bc *storagev1.BackupCatalog) ctrl.Result {
	w.T.Helper()
	r := &BackupCatalogReconciler{Client: k8s, Deps: w.Deps(k8s)}
	if w.stores != nil {
		r.Stores = w.stores
	}
	res, err := r.Reconcile(testCtx, storagetest.ReqFor(bc))
	if err != nil {
		w.T.Fatalf("reconcile catalog: %v", err)
	}
	w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(bc), bc))
	return res
}

// restore runs the PVCRestore pr to its end with the real PVCRestore reconciler and the real
// mover writing into dst.
func (w *world) restore(pr *storagev1.PVCRestore, dst string) {
	w.T.Helper()
	r := &pvcrestore.PVCRestoreReconciler{Client: k8s, Deps: w.Deps(k8s)}
	reconcileRestore := func() {
		if _, err := r.Reconcile(testCtx, storagetest.ReqFor(pr)); err != nil {
			w.T.Fatalf("reconcile restore: %v", err)
		}
		w.Must(k8s.Get(testCtx, client.ObjectKeyFromObject(pr), pr))
	}
	w.Must(k8s.Create(testCtx, pr))
	reconcileRestore()
	job := &batchv1.Job{}
	w.Must(k8s.Get(testCtx, client.ObjectKey{Namespace: pr.Namespace, Name: pr.Name + "-restore"}, job))
	res := w.RunMover(job, dst)
	w.FinishPod(job, res)
	w.FinishJob(job, res.Succeeded())
	reconcileRestore()
}

// treeDigest is the sha256 of every file's path, mode, and content (a symlink's target) under dir.
func treeDigest(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil // the volume's root: its mode is the test's temporary directory's
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var data []byte
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			data = []byte(target)
		case d.Type().IsRegular():
			if data, err = os.ReadFile(p); err != nil {
				return err
			}
		}
		sum := sha256.Sum256(data)
		out[rel] = info.Mode().String() + " " + hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
