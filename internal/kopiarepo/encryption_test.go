package kopiarepo

import (
	"bytes"
	"path/filepath"
	"testing"
)

// Nothing in the bucket shows the data or the names of the backed-up files: a distinctive
// string repeated through a file, and a distinctive file name, appear in no object.
func TestBucketHoldsNoPlaintext(t *testing.T) {
	const secret = "okgoes-PLAINTEXT-canary-7f3a9c"
	const secretName = "okgoes-secret-file-name-5b2e"
	b := newBucket(t)
	r := openRepo(t, b.config("volumes/db"), testPassword)
	src := t.TempDir()
	writeVolume(t, src)
	writeFile(t, filepath.Join(src, "data", secretName), bytes.Repeat([]byte(secret+"\n"), 50_000), 0o600)
	if _, err := r.Backup(testContext(t), src, BackupOptions{Source: "shop/db", Description: secret}); err != nil {
		t.Fatal(err)
	}

	objects := b.objects(t, "")
	if len(objects) < 5 {
		t.Fatalf("only %d objects in the bucket: %v", len(objects), objects)
	}
	for key := range objects {
		data := b.get(t, key)
		for _, needle := range []string{secret, secretName} {
			if bytes.Contains(data, []byte(needle)) || bytes.Contains([]byte(key), []byte(needle)) {
				t.Errorf("object %s holds the plaintext %q", key, needle)
			}
		}
	}
}
