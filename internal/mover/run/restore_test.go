package run

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	. "github.com/okgoes/okgoes-operator/internal/mover"
)

// backedUp runs a real backup of a small tree into MinIO and returns the restore environment.
func backedUp(t *testing.T) (env, *minio.Client) {
	t.Helper()
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "a/b"), 0o755)
	os.WriteFile(filepath.Join(src, "a/b/file"), bytes.Repeat([]byte("data "), 100000), 0o640)
	os.Symlink("a/b/file", filepath.Join(src, "link"))
	e, m := setup(t, src)
	if res := Backup(context.Background(), e.get, "test"); res.Result != "Succeeded" {
		t.Fatalf("backup: %+v", res)
	}
	admin, _ := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	e[EnvTargetDir] = t.TempDir()
	return e, admin
}

func TestRestoreRoundTrip(t *testing.T) {
	e, _ := backedUp(t)
	res := Restore(context.Background(), e.get)
	if res.Result != "Succeeded" || res.Files != 1 || res.SHA256 == "" {
		t.Fatalf("restore: %+v", res)
	}
	got, err := os.ReadFile(filepath.Join(e[EnvTargetDir], "a/b/file"))
	if err != nil || len(got) != 500000 {
		t.Errorf("restored file: %d bytes, %v", len(got), err)
	}
	if l, _ := os.Readlink(filepath.Join(e[EnvTargetDir], "link")); l != "a/b/file" {
		t.Errorf("symlink restored as %q", l)
	}
}

func TestRestoreRefusesOrCleansOrMerges(t *testing.T) {
	for _, tt := range []struct {
		policy     string
		wantResult Outcome
		wantReason Reason
		oldKept    bool
	}{
		{"", "Failed", ReasonTargetNotEmpty, true},
		{"Refuse", "Failed", ReasonTargetNotEmpty, true},
		{"Clean", "Succeeded", "", false},
		{"Merge", "Succeeded", "", true},
	} {
		t.Run("policy "+tt.policy, func(t *testing.T) {
			e, _ := backedUp(t)
			old := filepath.Join(e[EnvTargetDir], "precious")
			os.WriteFile(old, []byte("keep me?"), 0o600)
			e[EnvOverwrite] = tt.policy
			res := Restore(context.Background(), e.get)
			if res.Result != tt.wantResult || res.Reason != tt.wantReason {
				t.Fatalf("restore: %+v", res)
			}
			if _, err := os.Stat(old); (err == nil) != tt.oldKept {
				t.Errorf("existing file kept = %v, want %v", err == nil, tt.oldKept)
			}
		})
	}
}

func TestRestoreDetectsDamage(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, e env, s3 *minio.Client)
		reason Reason
	}{
		{"a flipped byte in the archive", func(t *testing.T, e env, s3 *minio.Client) {
			data := get(t, s3, e[EnvArchiveKey])
			data[len(data)/2] ^= 0x01
			put(t, s3, e[EnvArchiveKey], data)
		}, ReasonVerificationFailed},
		{"a truncated archive", func(t *testing.T, e env, s3 *minio.Client) {
			data := get(t, s3, e[EnvArchiveKey])
			put(t, s3, e[EnvArchiveKey], data[:len(data)/2])
		}, ReasonVerificationFailed},
		{"the manifest is missing", func(t *testing.T, e env, s3 *minio.Client) {
			if err := s3.RemoveObject(context.Background(), "backups", e[EnvManifestKey], minio.RemoveObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		}, ReasonBackupNotFound},
		{"a manifest that lies about the sha256", func(t *testing.T, e env, s3 *minio.Client) {
			data := get(t, s3, e[EnvManifestKey])
			i := bytes.Index(data, []byte(`"sha256": "`)) + len(`"sha256": "`)
			copy(data[i:], "00000000")
			put(t, s3, e[EnvManifestKey], data)
		}, ReasonVerificationFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, s3 := backedUp(t)
			tt.damage(t, e, s3)
			res := Restore(context.Background(), e.get)
			if res.Result != "Failed" || res.Reason != tt.reason {
				t.Fatalf("restore of a damaged backup: %+v, want %s", res, tt.reason)
			}
			t.Logf("%s: %s", res.Reason, res.Message)
		})
	}
}

func get(t *testing.T, s3 *minio.Client, key string) []byte {
	t.Helper()
	obj, err := s3.GetObject(context.Background(), "backups", key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(obj); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func put(t *testing.T, s3 *minio.Client, key string, data []byte) {
	t.Helper()
	if _, err := s3.PutObject(context.Background(), "backups", key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyChecksWithoutWriting(t *testing.T) {
	e, s3 := backedUp(t)
	if res := Verify(context.Background(), e.get); res.Result != "Succeeded" || res.SHA256 == "" {
		t.Fatalf("verify of a good backup: %+v", res)
	}
	if entries, _ := os.ReadDir(e[EnvTargetDir]); len(entries) != 0 {
		t.Errorf("verify wrote %d entries", len(entries))
	}
	data := get(t, s3, e[EnvArchiveKey])
	data[len(data)-20] ^= 0x01
	put(t, s3, e[EnvArchiveKey], data)
	if res := Verify(context.Background(), e.get); res.Result != "Failed" || res.Reason != ReasonVerificationFailed {
		t.Fatalf("verify of a damaged backup: %+v", res)
	}
}
