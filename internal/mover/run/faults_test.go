package run

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	. "github.com/okgoes/okgoes-operator/internal/mover"
	archiveengine "github.com/okgoes/okgoes-operator/internal/mover/engine/archive"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// A Clean restore empties the target only once the backup has proven readable: each way a
// backup can be unreadable before its first byte leaves the target exactly as it was, and says so.
func TestCleanRestoreNeverEmptiesTheTargetForAnUnreadableBackup(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, e env, s3 *minio.Client)
		reason Reason
	}{
		{"the archive is missing", func(t *testing.T, e env, s3 *minio.Client) {
			if err := s3.RemoveObject(context.Background(), "backups", e[EnvArchiveKey], minio.RemoveObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		}, ReasonBackupNotFound},
		{"the archive is shorter than its manifest says", func(t *testing.T, e env, s3 *minio.Client) {
			data := get(t, s3, e[EnvArchiveKey])
			put(t, s3, e[EnvArchiveKey], data[:len(data)-1])
		}, ReasonVerificationFailed},
		{"the archive is not a zstd stream", func(t *testing.T, e env, s3 *minio.Client) {
			data := get(t, s3, e[EnvArchiveKey])
			put(t, s3, e[EnvArchiveKey], bytes.Repeat([]byte{'x'}, len(data)))
		}, ReasonVerificationFailed},
		{"the manifest does not decode", func(t *testing.T, e env, s3 *minio.Client) {
			put(t, s3, e[EnvManifestKey], []byte("{not json"))
		}, ReasonVerificationFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, s3 := backedUp(t)
			precious := filepath.Join(e[EnvTargetDir], "precious")
			if err := os.WriteFile(precious, []byte("the only copy"), 0o600); err != nil {
				t.Fatal(err)
			}
			tt.damage(t, e, s3)
			e[EnvOverwrite] = "Clean"
			res := Restore(context.Background(), e.get)
			if res.Result != Failed || res.Reason != tt.reason {
				t.Fatalf("restore: %+v, want %s", res, tt.reason)
			}
			if got, err := os.ReadFile(precious); err != nil || string(got) != "the only copy" {
				t.Fatalf("the target was changed by a restore that could not read its backup: %q, %v", got, err)
			}
			if !strings.Contains(res.Message, "the target volume was not changed") {
				t.Errorf("the message does not say what state the target is in: %s", res.Message)
			}
		})
	}
}

// A Clean restore that fails half-way says that the target was emptied.
func TestFailedCleanRestoreSaysTheTargetWasEmptied(t *testing.T) {
	e, s3 := backedUp(t)
	os.WriteFile(filepath.Join(e[EnvTargetDir], "old"), []byte("old"), 0o600)
	data := get(t, s3, e[EnvArchiveKey])
	data[len(data)/2] ^= 0x01 // same size, damaged inside: found only while reading
	put(t, s3, e[EnvArchiveKey], data)
	e[EnvOverwrite] = "Clean"
	res := Restore(context.Background(), e.get)
	if res.Result != Failed || res.Reason != ReasonVerificationFailed || !strings.Contains(res.Message, "emptied (overwrite: Clean)") {
		t.Fatalf("restore: %+v", res)
	}
}

// A backup whose S3 side fails is reported as an S3 failure, not as a volume read error.
func TestBackupNamesTheFailingSide(t *testing.T) {
	src := t.TempDir()
	big := make([]byte, 8<<20)
	rand.NewChaCha8([32]byte{9}).Read(big)
	os.WriteFile(filepath.Join(src, "blob"), big, 0o600)
	e, m := setup(t, src)
	m.Stop()
	res := Backup(context.Background(), e.get, "test")
	if res.Result != Failed || res.Reason != ReasonStorageFailed || strings.HasPrefix(res.Message, "read volume") {
		t.Fatalf("backup to a dead S3: %+v, want StorageFailed naming the upload", res)
	}
	e, _ = setup(t, "/nonexistent")
	if res := Backup(context.Background(), e.get, "test"); res.Reason != ReasonVolumeReadFailed {
		t.Fatalf("backup of a missing volume: %+v, want VolumeReadFailed", res)
	}
}

// freezingStore freezes MinIO once the first bytes of the archive have reached it.
type freezingStore struct {
	*objectstore.Store
	freeze func()
	once   sync.Once
}

func (f *freezingStore) Upload(ctx context.Context, key string, r io.Reader, partSize uint64, progress io.Reader) (int64, error) {
	return f.Store.Upload(ctx, key, r, partSize, readHook{progress, func() { f.once.Do(f.freeze) }})
}

type readHook struct {
	r    io.Reader
	hook func()
}

func (h readHook) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.hook()
	return n, err
}

// MinIO frozen (SIGSTOP) in the middle of an upload: the mover gives up after its idle timeout
// with StorageStalled instead of hanging until the Job's deadline, and writes no manifest. Once
// the server is back (thawed 6 s after the freeze, while minio-go still tries to abort), the
// upload's parts are aborted, not left in the bucket.
func TestFrozenStorageEndsTheUploadAfterTheIdleTimeout(t *testing.T) {
	src := t.TempDir()
	big := make([]byte, 24<<20) // several 5 MiB parts
	rand.NewChaCha8([32]byte{5}).Read(big)
	os.WriteFile(filepath.Join(src, "blob"), big, 0o600)
	e, m := setup(t, src)
	e[EnvIdleTimeout] = "2s"
	cfg, store := storeOf(t, e)
	fs := &freezingStore{Store: store, freeze: func() {
		m.Freeze()
		time.AfterFunc(6*time.Second, m.Thaw)
	}}
	done := make(chan error, 1)
	go func() {
		_, err := archiveengine.Backup(context.Background(), fs, cfg.Job, time.Now)
		done <- err
	}()
	var backupErr error
	select {
	case backupErr = <-done:
	case <-time.After(3 * time.Minute): // a hang guard, far above the 2 s being tested
		m.Thaw()
		t.Fatal("the backup still hangs 3 minutes after S3 froze")
	}
	m.Thaw()
	if ReasonOf(backupErr, "") != ReasonStorageStalled || !strings.Contains(backupErr.Error(), "took no data for 2s") {
		t.Fatalf("backup against a frozen S3: %v, want StorageStalled", backupErr)
	}
	admin, _ := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if _, err := admin.StatObject(context.Background(), "backups", e[EnvManifestKey], minio.StatObjectOptions{}); err == nil {
		t.Error("a stalled backup wrote a manifest")
	}
	for u := range admin.ListIncompleteUploads(context.Background(), "backups", e[EnvArchiveKey], true) {
		t.Errorf("the stalled upload was not aborted: %+v", u)
	}
}
