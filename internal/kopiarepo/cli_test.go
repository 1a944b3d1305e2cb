package kopiarepo

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/okgoes/okgoes-operator/internal/testenv"
)

// The stock kopia CLI of the same version opens a repository the operator wrote, lists its
// snapshot and restores it byte for byte: an administrator can always reach the backups
// without the operator (docs/kopia.md has the commands).
func TestStockCLIOpensTheRepository(t *testing.T) {
	kopia := kopiaCLI(t)
	b := newBucket(t)
	cfg := b.config("volumes/db")
	src := t.TempDir()
	writeVolume(t, src)
	snap, err := openRepo(t, cfg, testPassword).Backup(testContext(t), src, BackupOptions{Source: "shop/db", Tags: map[string]string{"backup": "db-1"}})
	if err != nil {
		t.Fatal(err)
	}

	home := t.TempDir()
	run := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(kopia, append(args, "--config-file="+filepath.Join(home, "repository.config"))...)
		cmd.Env = append(os.Environ(), "HOME="+home, "KOPIA_LOG_DIR="+filepath.Join(home, "logs"), "KOPIA_CHECK_FOR_UPDATES=false")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("kopia %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return stdout.Bytes()
	}
	run("repository", "connect", "s3", "--bucket="+cfg.Bucket, "--endpoint="+cfg.Endpoint, "--disable-tls",
		"--prefix=volumes/db/", "--access-key="+cfg.AccessKey, "--secret-access-key="+cfg.SecretKey,
		"--password="+testPassword, "--cache-directory="+filepath.Join(home, "cache"))

	var listed []struct {
		ID     string `json:"id"`
		Source struct {
			Path string `json:"path"`
		} `json:"source"`
		Tags map[string]string `json:"tags"`
	}
	if err := json.Unmarshal(run("snapshot", "list", "--all", "--json"), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].ID != snap.ID || listed[0].Source.Path != "shop/db" || listed[0].Tags["tag:backup"] != "db-1" {
		t.Fatalf("kopia snapshot list --all = %+v, want the snapshot %s of shop/db", listed, snap.ID)
	}

	dst := filepath.Join(t.TempDir(), "restored")
	run("snapshot", "restore", snap.ID, dst)
	assertSameTree(t, src, dst)
	run("snapshot", "verify", "--verify-files-percent=100")
	if info := run("maintenance", "info"); !bytes.Contains(info, []byte(ClientUser+"@"+ClientHost)) {
		t.Errorf("kopia maintenance info does not name %s@%s as the owner:\n%s", ClientUser, ClientHost, info)
	}
}

// kopiaCLI returns bin/kopia (or $KOPIA_BINARY), building it with hack/tools/kopia/build.sh
// when it is missing: about 1.5 minutes on two cores once the operator's packages are in the Go
// build cache (the CLI is a tool of the operator's module: go.mod).
func kopiaCLI(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("KOPIA_BINARY"); bin != "" {
		return bin
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin", "kopia")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if testing.Short() {
		t.Skip("bin/kopia is missing and -short skips building it: run hack/tools/kopia/build.sh")
	}
	start := time.Now()
	out, err := exec.Command(filepath.Join(root, "hack", "tools", "kopia", "build.sh"), bin).CombinedOutput()
	if err != nil {
		t.Fatalf("building the kopia CLI with hack/tools/kopia/build.sh: %v\n%s", err, out)
	}
	t.Logf("built %s in %v", bin, time.Since(start).Round(time.Second))
	return bin
}

// A repository a person created with the CLI opens with the package and takes backups, but its
// maintenance stays with its creator until handed over: Maintenance says so, by name.
func TestRepositoryCreatedByTheCLI(t *testing.T) {
	kopia := kopiaCLI(t)
	b := newBucket(t)
	cfg := b.config("volumes/manual")
	home := t.TempDir()
	cmd := exec.Command(kopia, "repository", "create", "s3", "--bucket="+cfg.Bucket, "--endpoint="+cfg.Endpoint, "--disable-tls",
		"--prefix=volumes/manual/", "--access-key="+cfg.AccessKey, "--secret-access-key="+cfg.SecretKey,
		"--password="+testPassword, "--config-file="+filepath.Join(home, "repository.config"),
		"--cache-directory="+filepath.Join(home, "cache"), "--override-username=alice", "--override-hostname=laptop")
	cmd.Env = append(os.Environ(), "HOME="+home, "KOPIA_LOG_DIR="+filepath.Join(home, "logs"), "KOPIA_CHECK_FOR_UPDATES=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kopia repository create: %v\n%s", err, out)
	}

	r := openRepo(t, cfg, testPassword)
	ctx := testContext(t)
	src := t.TempDir()
	writeVolume(t, src)
	snap, err := r.Backup(ctx, src, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if _, err := r.Restore(ctx, snap.ID, dst); err != nil {
		t.Fatal(err)
	}
	assertSameTree(t, src, dst)
	if err := r.Maintenance(ctx, false, SafetyFull); !errors.Is(err, ErrMaintenanceNotOwned) || !strings.Contains(err.Error(), "alice@laptop") {
		t.Errorf("maintenance of alice's repository: %v, want ErrMaintenanceNotOwned naming alice@laptop", err)
	}
}
