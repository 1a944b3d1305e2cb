package pvcrestore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// A user restores one directory of a backup (spec.paths: [db]) into a new PVC, with each engine,
// through the controller, the real mover and MinIO: the Job hands the paths to the mover, only
// db comes back, byte for byte, and the status says how much of the backup that was; a path
// the backup does not hold fails PathNotInBackup and writes nothing.
func TestRestoreOfOneDirectoryIntoANewPVC(t *testing.T) {
	for _, engine := range []storagev1.BackupEngine{storagev1.EngineArchive, storagev1.EngineKopia} {
		t.Run(string(engine), func(t *testing.T) {
			w := newWorld(t)
			var src string
			if engine == storagev1.EngineKopia {
				pb, dir, first := w.KopiaStory("app")
				src = dir
				if res := w.KopiaRun(pb, first, 1, src); !res.Succeeded() {
					t.Fatalf("backup: %+v", res)
				}
			} else {
				src = storagetest.Volume(t)
				w.backupNow("app", src)
			}

			pr := newRestore(w.NS, "back", "app")
			pr.Spec.Paths = []storagev1.RestorePath{"db"}
			w.Must(k8s.Create(testCtx, pr))
			w.reconcileRestore(pr)
			if pr.Status.Engine != engine {
				t.Fatalf("restore status: %+v", pr.Status)
			}
			var paths string
			for _, v := range w.restoreJob(pr).Spec.Template.Spec.Containers[0].Env {
				if v.Name == mover.EnvRestorePaths {
					paths = v.Value
				}
			}
			if paths != `["db"]` {
				t.Errorf("%s = %q, want [\"db\"]", mover.EnvRestorePaths, paths)
			}

			dst := t.TempDir()
			w.restoreInto(pr, dst)
			c := condition2(pr)
			if pr.Status.Phase != storagev1.RestoreSucceeded || pr.Status.Files != 2 || c.Status != metav1.ConditionTrue || c.Reason != ReasonRestored {
				t.Fatalf("restore: %+v", pr.Status)
			}
			if want := "restored the requested paths: 2 files (3145728 bytes) of the backup's 3 files (3145734 bytes)"; !strings.Contains(c.Message, want) {
				t.Errorf("Complete message %q does not say %q", c.Message, want)
			}
			for _, f := range []string{"db/data.bin", "db/empty"} {
				a, _ := os.ReadFile(filepath.Join(src, f))
				b, err := os.ReadFile(filepath.Join(dst, f))
				if err != nil || string(a) != string(b) {
					t.Errorf("%s differs after the restore (%v)", f, err)
				}
			}
			for _, f := range []string{"README", "latest"} {
				if _, err := os.Lstat(filepath.Join(dst, f)); !os.IsNotExist(err) {
					t.Errorf("%s is not under the paths, yet was restored (%v)", f, err)
				}
			}

			// A path the backup does not hold: Failed, PathNotInBackup naming it, nothing written.
			bad := newRestore(w.NS, "bad", "app")
			bad.Spec.Paths = []storagev1.RestorePath{"db", "var/lib/nope"}
			w.Must(k8s.Create(testCtx, bad))
			w.reconcileRestore(bad)
			empty := t.TempDir()
			w.restoreInto(bad, empty)
			c = condition2(bad)
			if bad.Status.Phase != storagev1.RestoreFailed || c.Reason != string(mover.ReasonPathNotInBackup) ||
				!strings.Contains(c.Message, `"var/lib/nope"`) || !strings.Contains(c.Message, "the target volume was not changed") {
				t.Errorf("restore of an absent path: %+v, Complete = %+v", bad.Status, c)
			}
			if left, _ := os.ReadDir(empty); len(left) != 0 {
				t.Errorf("the failed restore wrote %v", left)
			}
		})
	}
}
