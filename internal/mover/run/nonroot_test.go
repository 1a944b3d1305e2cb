package run

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	. "github.com/okgoes/okgoes-operator/internal/mover"
)

// moverUID is the uid the controller runs mover pods as (controllers/storage).
const moverUID = 65532

// restoreAsMover runs a restore of e in a child process as moverUID, with only the mover's
// supplementary group, as the restricted mover pod runs it, and returns its Result.
func restoreAsMover(t *testing.T, e env) Result {
	t.Helper()
	// The child runs a copy of this test binary from a place moverUID can reach.
	bin := filepath.Join(worldDir(t), "mover.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()

	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = []string{"MOVER_BENCH_CHILD=restore-result", "HOME=/nonexistent"}
	for k, v := range e {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: moverUID, Gid: moverUID, Groups: []uint32{moverUID}}}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mover child: %v", err)
	}
	var res Result
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("mover child printed %q: %v", out, err)
	}
	return res
}

// worldDir is a fresh directory every user can enter and write (sticky, like /tmp).
func worldDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mover-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A restricted mover (non-root, no capabilities) restores into a volume root it does not own,
// the way the kubelet prepares one with fsGroup: root-owned, group moverUID, setgid, group
// writable. The root keeps its owner and mode; everything inside is restored.
func TestNonRootMoverRestoresIntoAnFSGroupVolume(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to start the mover as another user")
	}
	e, _ := backedUp(t)
	dir := worldDir(t)
	vol := filepath.Join(dir, "vol")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(vol, 0, moverUID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(vol, 0o775|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	e[EnvTargetDir] = vol
	e[EnvTerminationLog] = filepath.Join(dir, "termination-log")

	res := restoreAsMover(t, e)
	if res.Result != "Succeeded" || res.Files != 1 {
		t.Fatalf("non-root restore into an fsGroup volume: %+v", res)
	}
	fi, err := os.Stat(vol)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != moverUID || fi.Mode() != os.ModeDir|os.ModeSetgid|0o775 {
		t.Errorf("volume root changed: %v uid %d gid %d", fi.Mode(), st.Uid, st.Gid)
	}
	got, err := os.ReadFile(filepath.Join(vol, "a/b/file"))
	if err != nil || len(got) != 500000 {
		t.Errorf("restored file: %d bytes, %v", len(got), err)
	}
	if fi, err := os.Lstat(filepath.Join(vol, "a/b/file")); err == nil {
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != moverUID {
			t.Errorf("restored file owned by uid %d, want the mover's %d", st.Uid, moverUID)
		}
	}
}

// A volume the mover cannot write is the target's fault, not the backup's: TargetNotWritable,
// never VerificationFailed.
func TestNonRootMoverReportsAnUnwritableTarget(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to start the mover as another user")
	}
	e, _ := backedUp(t)
	dir := worldDir(t)
	vol := filepath.Join(dir, "vol")
	if err := os.Mkdir(vol, 0o755); err != nil { // root's, read-only for the mover
		t.Fatal(err)
	}
	e[EnvTargetDir] = vol
	e[EnvTerminationLog] = filepath.Join(dir, "termination-log")

	res := restoreAsMover(t, e)
	if res.Result != "Failed" || res.Reason != ReasonTargetNotWritable {
		t.Fatalf("restore into an unwritable volume: %+v, want Failed/%s", res, ReasonTargetNotWritable)
	}
	t.Logf("%s: %s", res.Reason, res.Message)
}
