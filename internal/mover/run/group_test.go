package run

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	. "github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/testenv"
)

// groupVolumes is the source directory of a group backup as the mover Job sees it: each member's
// volume at <dir>/<pvc> (here plain directories, each with files of its own).
func groupVolumes(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	randomFile(t, filepath.Join(src, "db", "base", "16384"), 3<<20, 1)
	randomFile(t, filepath.Join(src, "db", "PG_VERSION"), 3, 2)
	randomFile(t, filepath.Join(src, "wal", "000000010000000000000001"), 1<<20, 3)
	if err := os.Symlink("000000010000000000000001", filepath.Join(src, "wal", "current")); err != nil {
		t.Fatal(err)
	}
	return src
}

// A group backup, made by the mover in a process of its own against a real MinIO, is one backup
// (one manifest, one id) that names its members and holds each member's tree under the
// directory of its name: restored, each directory is that member's volume, byte for byte.
func TestGroupBackupHoldsEachMembersTree(t *testing.T) {
	for _, engine := range []string{EngineArchive, EngineKopia} {
		t.Run(engine, func(t *testing.T) {
			src := groupVolumes(t)
			var e env
			var m *testenv.MinIO
			if engine == EngineKopia {
				e, m, _ = kopiaSetup(t, src)
			} else {
				e, m = setup(t, src)
			}
			e[EnvSourcePVC], e[EnvSourcePVCs] = "", "db,wal"
			res, ok := startBackupProcess(t, e).result(t, 2*time.Minute)
			if !ok || !res.Succeeded() || res.Files != 3 {
				t.Fatalf("group backup: %+v (ended: %v)", res, ok)
			}
			s3, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
			if err != nil {
				t.Fatal(err)
			}
			man := readManifestObject(t, s3, e[EnvManifestKey])
			if !reflect.DeepEqual(man.Source.PVCs, []string{"db", "wal"}) || man.Source.PVC != "" || man.ID != e[EnvBackupID] {
				t.Errorf("manifest source %+v, id %s: want the members db and wal of backup %s", man.Source, man.ID, e[EnvBackupID])
			}

			e[EnvTargetDir] = t.TempDir()
			restored, ok := startMoverProcess(t, "restore-result", e).result(t, 2*time.Minute)
			if !ok || !restored.Succeeded() {
				t.Fatalf("restore: %+v (ended: %v)", restored, ok)
			}
			for _, member := range []string{"db", "wal"} {
				sameTree(t, filepath.Join(src, member), filepath.Join(e[EnvTargetDir], member))
			}
		})
	}
}

// A member whose volume is not mounted fails the backup before anything is read (Reason
// VolumeReadFailed, naming the member): backed up as nothing, it would restore as an empty
// volume. No manifest is written, so nothing passes for a backup.
func TestGroupBackupOfAnUnmountedMemberFails(t *testing.T) {
	src := groupVolumes(t)
	e, m := setup(t, src)
	e[EnvSourcePVC], e[EnvSourcePVCs] = "", "db,logs,wal"
	res, ok := startBackupProcess(t, e).result(t, 2*time.Minute)
	if !ok || res.Succeeded() || res.Reason != ReasonVolumeReadFailed || !containsAll(res.Message, "logs", filepath.Join(src, "logs")) {
		t.Fatalf("backup with member logs unmounted: %+v (ended: %v), want VolumeReadFailed naming logs", res, ok)
	}
	s3, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s3.StatObject(t.Context(), "backups", e[EnvManifestKey], minio.StatObjectOptions{}); err == nil {
		t.Errorf("a manifest was written for a group backup with a member missing")
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
