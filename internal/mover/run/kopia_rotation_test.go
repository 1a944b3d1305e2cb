package run

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/testenv"
)

// The user rotates the repository password: the Secret's key holds the new password B, and
// "<key>.previous" the old one A. Before the next backup, a restore opens the repository with A;
// the backup opens it with A, changes its password to B and says so; from then on the stock kopia
// CLI connects with B and no longer with A, and every earlier backup restores with B alone.
func TestKopiaBackupRotatesThePassword(t *testing.T) {
	const oldPassword, newPassword = kopiaTestPassword, "a new password, rotated in"
	src := t.TempDir()
	randomFile(t, filepath.Join(src, "a"), 1<<20, 1)
	randomFile(t, filepath.Join(src, "b"), 4096, 2)
	e, m, _ := kopiaSetup(t, src)
	ctx := context.Background()
	before := filepath.Join(t.TempDir(), "before")
	if out, err := exec.Command("cp", "-a", src, before).CombinedOutput(); err != nil {
		t.Fatalf("keep the first backup's tree: %v %s", err, out)
	}
	if res := Backup(ctx, e.get, "test"); !res.Succeeded() || res.PasswordRotated {
		t.Fatalf("first backup (password A) = %+v", res)
	}

	// The Secret changes: B under the key, A under <key>.previous.
	e[EnvKopiaPassword], e[EnvKopiaPreviousPassword] = newPassword, oldPassword
	e[EnvTargetDir] = t.TempDir()
	if res := Restore(ctx, e.get); !res.Succeeded() {
		t.Fatalf("restore while the repository still has A, with B and previous A = %+v", res)
	}
	sameTree(t, before, e[EnvTargetDir])
	if cli := kopiaConnects(t, m, oldPassword); cli != nil {
		t.Fatalf("a restore changed the repository's password: A no longer connects: %v", cli)
	}

	randomFile(t, filepath.Join(src, "b"), 4096, 3)
	nextRun(e, "20261203T030000Z")
	e[EnvKopiaCacheDir] = t.TempDir() // a new Job's emptyDir
	rotated := Backup(ctx, e.get, "test")
	if !rotated.Succeeded() || !rotated.PasswordRotated {
		t.Fatalf("backup with B and previous A = %+v, want a success that rotated the password", rotated)
	}
	if err := kopiaConnects(t, m, newPassword); err != nil {
		t.Errorf("after the rotation the stock kopia CLI does not connect with B: %v", err)
	}
	if err := kopiaConnects(t, m, oldPassword); err == nil {
		t.Errorf("after the rotation the stock kopia CLI still connects with A")
	}

	// .previous removed: B alone opens the repository, for new backups and for the one made with A.
	delete(e, EnvKopiaPreviousPassword)
	nextRun(e, "20261203T040000Z")
	e[EnvKopiaCacheDir] = t.TempDir()
	if res := Backup(ctx, e.get, "test"); !res.Succeeded() || res.PasswordRotated {
		t.Fatalf("backup with B alone after the rotation = %+v", res)
	}
	nextRun(e, "20261203T020000Z")
	if res := Verify(ctx, e.get); !res.Succeeded() {
		t.Errorf("verify of the backup made with A, with B alone = %+v", res)
	}
	e[EnvTargetDir] = t.TempDir()
	if res := Restore(ctx, e.get); !res.Succeeded() {
		t.Fatalf("restore of the backup made with A, with B alone = %+v", res)
	}
	sameTree(t, before, e[EnvTargetDir])
	nextRun(e, "20261203T030000Z")
	e[EnvTargetDir] = t.TempDir()
	if res := Restore(ctx, e.get); !res.Succeeded() {
		t.Fatalf("restore of the backup that rotated, with B alone = %+v", res)
	}
	sameTree(t, src, e[EnvTargetDir])
}

// A wrong pair (neither the password nor the previous one opens the repository) is
// RepositoryPasswordWrong for a backup and a restore, and changes nothing: the repository's own
// password still opens it, and the target volume is untouched.
func TestKopiaWrongPasswordPairChangesNothing(t *testing.T) {
	src := t.TempDir()
	randomFile(t, filepath.Join(src, "a"), 4096, 1)
	e, m, _ := kopiaSetup(t, src)
	ctx := context.Background()
	if res := Backup(ctx, e.get, "test"); !res.Succeeded() {
		t.Fatalf("backup = %+v", res)
	}
	e[EnvKopiaPassword], e[EnvKopiaPreviousPassword] = "wrong new", "wrong old"
	nextRun(e, "20261203T030000Z")
	e[EnvKopiaCacheDir] = t.TempDir()
	res := Backup(ctx, e.get, "test")
	if res.Reason != ReasonRepositoryPasswordWrong || !strings.Contains(res.Message, "neither the repository password nor the previous one") {
		t.Errorf("backup with a wrong pair = %+v, want %s naming both passwords", res, ReasonRepositoryPasswordWrong)
	}
	if strings.Contains(res.Message, "wrong new") || strings.Contains(res.Message, "wrong old") {
		t.Errorf("the result holds a password: %q", res.Message)
	}
	nextRun(e, "20261203T020000Z")
	target := t.TempDir()
	randomFile(t, filepath.Join(target, "keep"), 10, 2)
	e[EnvTargetDir], e[EnvOverwrite] = target, "Clean"
	if res := Restore(ctx, e.get); res.Reason != ReasonRepositoryPasswordWrong {
		t.Errorf("restore with a wrong pair = %+v", res)
	}
	if _, err := os.Stat(filepath.Join(target, "keep")); err != nil {
		t.Errorf("a failed restore touched the target: %v", err)
	}
	if err := kopiaConnects(t, m, kopiaTestPassword); err != nil {
		t.Errorf("after a wrong pair the repository's password no longer connects: %v", err)
	}
}

// kopiaConnects runs the stock kopia CLI (bin/kopia, the same version as the operator's
// library) `repository connect s3` to the repository of kopiaSetup with password: nil when it
// connects, its error and output when it does not.
func kopiaConnects(t *testing.T, m *testenv.MinIO, password string) error {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin", "kopia")
	if v := os.Getenv("KOPIA_BINARY"); v != "" {
		bin = v
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("the stock kopia CLI is missing (%v): run hack/tools/kopia/build.sh", err)
	}
	home := t.TempDir()
	cmd := exec.Command(bin, "repository", "connect", "s3", "--bucket=backups", "--endpoint="+m.Endpoint, "--disable-tls",
		"--prefix=ns/app/kopia/", "--access-key="+m.AccessKey, "--secret-access-key="+m.SecretKey,
		"--password="+password, "--cache-directory="+filepath.Join(home, "cache"),
		"--config-file="+filepath.Join(home, "repository.config"))
	cmd.Env = append(os.Environ(), "HOME="+home, "KOPIA_LOG_DIR="+filepath.Join(home, "logs"), "KOPIA_CHECK_FOR_UPDATES=false")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return &cliError{err: err, out: out.String()}
	}
	return nil
}

type cliError struct {
	err error
	out string
}

func (e *cliError) Error() string { return e.err.Error() + ": " + e.out }

// A backup that changed the password and then failed (here: its volume cannot be read) says it
// rotated: the rotation stands, and the next run would open with the new password silently.
func TestKopiaRotationStandsWhenTheBackupFails(t *testing.T) {
	src := t.TempDir()
	randomFile(t, filepath.Join(src, "a"), 4096, 1)
	e, m, _ := kopiaSetup(t, src)
	ctx := context.Background()
	if res := Backup(ctx, e.get, "test"); !res.Succeeded() {
		t.Fatalf("backup with A = %+v", res)
	}
	e[EnvKopiaPassword], e[EnvKopiaPreviousPassword] = "B", kopiaTestPassword
	e[EnvSourceDir] = filepath.Join(src, "gone")
	nextRun(e, "20261203T030000Z")
	res := Backup(ctx, e.get, "test")
	if res.Succeeded() || !res.PasswordRotated {
		t.Fatalf("backup of a missing volume with B and previous A = %+v, want a failure that says it rotated", res)
	}
	if err := kopiaConnects(t, m, "B"); err != nil {
		t.Errorf("the stock kopia CLI does not connect with B: %v", err)
	}
}
