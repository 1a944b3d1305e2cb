package run

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
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
			e, m := setupFor(t, engine, src)
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

			e[EnvTargetDir] = groupTargets(t, "db", "wal")
			e[EnvRestoreMembers] = "db=Refuse,wal=Refuse"
			// The directory the members are mounted in is the container's (in a pod, on its
			// read-only root file system), no member's: the restore leaves it as it is.
			old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
			if err := os.Chmod(e[EnvTargetDir], 0o711); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(e[EnvTargetDir], old, old); err != nil {
				t.Fatal(err)
			}
			restored, ok := startMoverProcess(t, "restore-result", e).result(t, 2*time.Minute)
			if !ok || !restored.Succeeded() || restored.Files != 3 {
				t.Fatalf("group restore: %+v (ended: %v)", restored, ok)
			}
			if fi, err := os.Stat(e[EnvTargetDir]); err != nil || fi.Mode().Perm() != 0o711 || !fi.ModTime().Equal(old) {
				t.Errorf("the directory of the members' mounts became %v %v (%v): want it untouched, 0711 %v", fi.Mode(), fi.ModTime(), err, old)
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

// groupTargets is the target directory of a group restore as the mover Job sees it: each
// member's target volume mounted at <dir>/<member> (here empty directories).
func groupTargets(t *testing.T, members ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, m := range members {
		if err := os.Mkdir(filepath.Join(dir, m), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// groupBackedUp makes a real archive group backup of the members db and wal, and returns the
// environment to restore it, and its source.
func groupBackedUp(t *testing.T) (env, string) {
	t.Helper()
	src := groupVolumes(t)
	e, _ := setup(t, src)
	e[EnvSourcePVC], e[EnvSourcePVCs] = "", "db,wal"
	if res := Backup(t.Context(), e.get, "test"); !res.Succeeded() {
		t.Fatalf("group backup: %+v", res)
	}
	return e, src
}

// Whatever does not match the backup is refused before any target is touched: a group backup
// restored as one volume, a restore whose targets are not the backup's members, a member whose
// target volume is not mounted.
func TestGroupRestoreRefusesWhatDoesNotMatchTheBackup(t *testing.T) {
	e, _ := groupBackedUp(t)
	tests := []struct {
		name, members string
		mounted       []string
		reason        Reason
		says          []string
	}{
		{"one volume", "", []string{"db", "wal"}, ReasonInvalidConfig, []string{"is a group backup of db, wal", EnvRestoreMembers}},
		{"a member without target", "db=Refuse", []string{"db", "wal"}, ReasonInvalidConfig, []string{"group backup of db, wal", "targets for db"}},
		{"a target of no member", "db=Refuse,wal=Refuse,logs=Merge", []string{"db", "wal", "logs"}, ReasonInvalidConfig, []string{"targets for db, logs, wal"}},
		{"a target not mounted", "db=Refuse,wal=Refuse", []string{"db"}, ReasonTargetNotWritable, []string{"group member wal is not mounted"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := maps.Clone(e)
			e[EnvTargetDir], e[EnvRestoreMembers] = groupTargets(t, tt.mounted...), tt.members
			marker := filepath.Join(e[EnvTargetDir], tt.mounted[0], "keep")
			if err := os.WriteFile(marker, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			e[EnvOverwrite] = "Clean" // the one-volume case would empty the target: it must not
			res := Restore(t.Context(), e.get)
			if res.Succeeded() || res.Reason != tt.reason || !containsAll(res.Message, tt.says...) ||
				!containsAll(res.Message, "the target volume was not changed") {
				t.Fatalf("restore: %+v, want %s saying %q and that nothing changed", res, tt.reason, tt.says)
			}
			if _, err := os.Stat(marker); err != nil {
				t.Errorf("a refused restore touched the target: %v", err)
			}
		})
	}
}

// Each member's target has its own overwrite policy, and a refusal of any comes before a change
// to any: a Refuse target holding data fails the restore while the Clean target beside it is
// still untouched; with Merge instead, the Clean target is emptied and the Merge one keeps its
// files beside the restored ones.
func TestGroupRestoreAppliesEachMembersOverwrite(t *testing.T) {
	e, src := groupBackedUp(t)
	target := groupTargets(t, "db", "wal")
	e[EnvTargetDir] = target
	old := map[string]string{"db": filepath.Join(target, "db", "stale"), "wal": filepath.Join(target, "wal", "archived")}
	for _, p := range old {
		if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e[EnvRestoreMembers] = "db=Clean,wal=Refuse"
	res := Restore(t.Context(), e.get)
	if res.Succeeded() || res.Reason != ReasonTargetNotEmpty || !containsAll(res.Message, "group member wal", "archived") {
		t.Fatalf("restore with wal=Refuse over data: %+v", res)
	}
	if _, err := os.Stat(old["db"]); err != nil {
		t.Fatalf("db (Clean) was emptied for a restore that was refused: %v", err)
	}

	e[EnvRestoreMembers] = "db=Clean,wal=Merge"
	if res := Restore(t.Context(), e.get); !res.Succeeded() {
		t.Fatalf("restore with db=Clean, wal=Merge: %+v", res)
	}
	if _, err := os.Stat(old["db"]); !os.IsNotExist(err) {
		t.Errorf("db (Clean) kept %s: %v", old["db"], err)
	}
	if _, err := os.Stat(old["wal"]); err != nil {
		t.Errorf("wal (Merge) lost its file: %v", err)
	}
	sameTree(t, filepath.Join(src, "db"), filepath.Join(target, "db"))
}

// A restricted mover (non-root, no capabilities) restores a group into the members' volumes the
// way a pod mounts them: the directory the mounts are in is root's and not writable, each
// volume root is root's with the fsGroup. Every volume root keeps its owner and mode, and holds
// its member's files.
func TestNonRootMoverRestoresAGroupIntoFSGroupVolumes(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to start the mover as another user")
	}
	for _, engine := range []string{EngineArchive, EngineKopia} {
		t.Run(engine, func(t *testing.T) {
			src := groupVolumes(t)
			e, _ := setupFor(t, engine, src)
			e[EnvSourcePVC], e[EnvSourcePVCs] = "", "db,wal"
			if res := Backup(t.Context(), e.get, "test"); !res.Succeeded() {
				t.Fatalf("group backup: %+v", res)
			}
			dir := worldDir(t)
			data := filepath.Join(dir, "data")
			if err := os.Mkdir(data, 0o755); err != nil { // root's: the container's /data
				t.Fatal(err)
			}
			for _, m := range []string{"db", "wal"} {
				vol := filepath.Join(data, m)
				if err := os.Mkdir(vol, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(vol, 0, moverUID); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(vol, 0o775|os.ModeSetgid); err != nil {
					t.Fatal(err)
				}
			}
			e[EnvTargetDir], e[EnvRestoreMembers] = data, "db=Refuse,wal=Refuse"
			e[EnvTerminationLog] = filepath.Join(dir, "termination-log")
			if engine == EngineKopia {
				e[EnvKopiaCacheDir] = filepath.Join(dir, "kopia-cache")
			}
			res := restoreAsMover(t, e)
			if !res.Succeeded() || res.Files != 3 {
				t.Fatalf("non-root group restore: %+v", res)
			}
			for _, m := range []string{"db", "wal"} {
				vol := filepath.Join(data, m)
				fi, err := os.Stat(vol)
				if err != nil {
					t.Fatal(err)
				}
				if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != moverUID || fi.Mode() != os.ModeDir|os.ModeSetgid|0o775 {
					t.Errorf("volume root %s changed: %v uid %d gid %d", m, fi.Mode(), st.Uid, st.Gid)
				}
				sameTreeContent(t, filepath.Join(src, m), vol)
			}
		})
	}
}

// sameTreeContent fails t unless every file of src is in dst with the same content (modes may
// differ: a non-root restore cannot give the volume root its archived mode).
func sameTreeContent(t *testing.T, src, dst string) {
	t.Helper()
	filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if sum(t, p) != sum(t, filepath.Join(dst, rel)) {
			t.Errorf("%s: content differs", rel)
		}
		return nil
	})
}

// setupFor is the environment of a mover of engine backing up source into a MinIO of its own.
func setupFor(t *testing.T, engine, source string) (env, *testenv.MinIO) {
	t.Helper()
	if engine == EngineKopia {
		e, m, _ := kopiaSetup(t, source)
		return e, m
	}
	return setup(t, source)
}
