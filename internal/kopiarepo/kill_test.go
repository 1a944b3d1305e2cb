package kopiarepo

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// helperEnv carries the repository and the source to the backup process of
// TestKilledBackupLeavesAWorkingRepository.
const helperEnv = "KOPIAREPO_KILLED_BACKUP"

type helperArgs struct {
	Config   S3Config
	Source   string
	CacheDir string
}

// A mover killed with SIGKILL mid-backup (OOM, node loss) saves nothing; the repository still
// opens, the next backup completes and restores, and full maintenance removes the packs the
// killed one left behind.
func TestKilledBackupLeavesAWorkingRepository(t *testing.T) {
	const files, fileSize = 12, 4 << 20
	b := newBucket(t)
	cfg := b.config("volumes/big")
	src := bigVolume(t, files, fileSize)
	openRepo(t, cfg, testPassword) // create it here, so that the killed process only backs up

	args, err := json.Marshal(helperArgs{Config: cfg, Source: src, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledBackupHelper$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(args))
	out, err := os.Create(filepath.Join(t.TempDir(), "helper.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ctx := testContext(t)
	for !hasObject(ctx, b, "volumes/big/p") {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(out.Name())
			t.Fatalf("the backup process ended (%v) before it was killed:\n%s", err, log)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	leftBehind := b.bytesUnder(t, "volumes/big/")

	r := openRepo(t, cfg, testPassword)
	next, err := r.Backup(ctx, src, BackupOptions{Source: "shop/big"})
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if _, err := r.Restore(ctx, next.ID, dst); err != nil {
		t.Fatal(err)
	}
	assertSameTree(t, src, dst)

	if err := r.Maintenance(ctx, true, SafetyNone); err != nil {
		t.Fatal(err)
	}
	after := b.bytesUnder(t, "volumes/big/")
	t.Logf("the killed backup left %d bytes; after the next backup and full maintenance the repository holds %d (the data is %d)", leftBehind, after, files*fileSize)
	if after > files*fileSize*11/10 {
		t.Errorf("after full maintenance the repository holds %d bytes for %d bytes of data: the killed backup's packs stayed", after, files*fileSize)
	}
}

// TestKilledBackupHelper is the process TestKilledBackupLeavesAWorkingRepository kills.
func TestKilledBackupHelper(t *testing.T) {
	raw := os.Getenv(helperEnv)
	if raw == "" {
		t.Skip("runs only as the backup process of TestKilledBackupLeavesAWorkingRepository")
	}
	var args helperArgs
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := Open(ctx, args.Config, testPassword, Options{CacheDir: args.CacheDir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Backup(ctx, args.Source, BackupOptions{Source: "shop/big"})
	t.Fatalf("the backup was not killed: %v", err)
}

func hasObject(ctx context.Context, b bucket, prefix string) bool {
	for o := range b.admin.ListObjects(ctx, testBucket, minio.ListObjectsOptions{Prefix: prefix}) {
		if o.Err == nil {
			return true
		}
	}
	return false
}
