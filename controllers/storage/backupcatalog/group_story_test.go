package backupcatalog

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
)

// A group backup (kopia) is listed by a BackupCatalog with its members, and restored from the
// catalog's status alone (spec.source.s3, no PVCBackup in the restoring namespace) by a
// PVCRestore with one target per listed member: each member's volume comes back byte for byte.
func TestCatalogListsAGroupBackupWithItsMembersAndItRestores(t *testing.T) {
	w := newWorld(t)
	team := w.namespace("team-", nil)
	src := t.TempDir()
	for _, member := range []string{"db", "wal"} {
		team.Must(k8s.Create(testCtx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: team.NS, Name: member},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}))
		w.Must(os.MkdirAll(filepath.Join(src, member, "sub"), 0o755))
		w.Must(os.WriteFile(filepath.Join(src, member, "sub", "file"), []byte("the "+member+" volume\n"), 0o640))
	}
	pb := team.KopiaBackup("app", "@daily")
	pb.Spec.PVCName, pb.Spec.Group = "", &storagev1.PVCGroup{PVCNames: []string{"db", "wal"}}
	team.backupNow(pb, src)

	fresh := w.namespace("recovery-", nil)
	bc := fresh.catalog("everything")
	fresh.reconcileCatalog(bc)
	if len(bc.Status.Sources) != 1 || len(bc.Status.Sources[0].Backups) != 1 {
		t.Fatalf("catalog status: %+v", bc.Status)
	}
	source := bc.Status.Sources[0]
	backup := source.Backups[0]
	if !reflect.DeepEqual(backup.PVCs, []string{"db", "wal"}) || backup.ID != pb.Status.LastRun.ID {
		t.Fatalf("listed backup %+v: want backup %s of the members db and wal", backup, pb.Status.LastRun.ID)
	}

	pr := restoreFrom(bc, source, backup.ID, "back")
	pr.Spec.Target = nil
	for _, member := range backup.PVCs {
		pr.Spec.Targets = append(pr.Spec.Targets, storagev1.GroupRestoreTarget{SourcePVC: member,
			RestoreTarget: storagev1.RestoreTarget{NewPVC: &storagev1.NewPVCTemplate{Name: member + "-back", Size: resource.MustParse("1Gi")}}})
	}
	dst := t.TempDir()
	for _, member := range backup.PVCs {
		w.Must(os.Mkdir(filepath.Join(dst, member), 0o755)) // the kubelet's mounts of the new volumes
	}
	fresh.restore(pr, dst)
	if pr.Status.Phase != storagev1.RestoreSucceeded {
		t.Fatalf("group restore from the catalog: %+v", pr.Status)
	}
	if got, want := treeDigest(t, dst), treeDigest(t, src); !maps.Equal(got, want) {
		t.Errorf("restored group differs from the volumes backed up:\n got %v\nwant %v", got, want)
	}
}
