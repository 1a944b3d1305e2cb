package run

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	. "github.com/okgoes/okgoes-operator/internal/mover"
)

// envMinIORetries sets minio-go's retries of each request in a backup-result child (TestMain):
// kopia retries each S3 call ten times over about 11 s, and minio-go each attempt ten times
// more, so with minio-go's default a call gives up only after about 2 minutes of outage.
const envMinIORetries = "MOVER_TEST_MINIO_RETRIES"

// moverProcess is a backup run by the mover in a process of its own (this test binary as the
// mover, TestMain), as a Job's container runs it.
type moverProcess struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	exited chan struct{}
}

func startBackupProcess(t *testing.T, e env) *moverProcess {
	t.Helper()
	return startMoverProcess(t, "backup-result", e)
}

// startMoverProcess runs the mover as role (TestMain: backup-result, restore-result).
func startMoverProcess(t *testing.T, role string, e env) *moverProcess {
	t.Helper()
	p := &moverProcess{cmd: exec.Command(os.Args[0], "-test.run=^$"), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "MOVER_BENCH_CHILD="+role)
	for k, v := range e {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, os.Stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// result waits at most bound for the process to end and returns its Result.
func (p *moverProcess) result(t *testing.T, bound time.Duration) (Result, bool) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(bound):
		return Result{}, false
	}
	var res Result
	if err := json.Unmarshal(p.out.Bytes(), &res); err != nil {
		t.Fatalf("the mover printed %q: %v", p.out.String(), err)
	}
	return res, true
}

// waitUntil polls until cond holds, failing the test when the process ends first.
func (p *moverProcess) waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-p.exited:
			t.Fatalf("the mover ended before %s: %s", what, p.out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// uploadStarted tells when the backup of e has put its first bytes into the bucket: a kopia pack,
// or a part of the archive's multipart upload.
func uploadStarted(s3 *minio.Client, e env) func() bool {
	return func() bool {
		ctx := context.Background()
		if e[EnvEngine] == EngineKopia {
			for o := range s3.ListObjects(ctx, "backups", minio.ListObjectsOptions{Prefix: e[EnvKopiaPrefix] + "/p", Recursive: true}) {
				return o.Err == nil
			}
			return false
		}
		for u := range s3.ListIncompleteUploads(ctx, "backups", e[EnvArchiveKey], true) {
			return u.Err == nil
		}
		return false
	}
}

// stallVolume is a volume whose upload takes long enough to be caught in the middle.
func stallVolume(t *testing.T) string {
	src := t.TempDir()
	for i := range 32 {
		randomFile(t, filepath.Join(src, fmt.Sprintf("f%02d", i)), 4<<20, byte(i+1))
	}
	return src
}

// stallBound is how long after the idle timeout a mover may take to end once S3 froze: it
// aborts its S3 calls, the upload and the repository's close, and writes its result. A hang
// guard, not a measure of speed: a mover that waits for the frozen server never ends.
const stallBound = 90 * time.Second

// MinIO frozen (SIGSTOP) in the middle of an upload: the mover process ends with StorageStalled
// within its idle timeout and a bound, for both engines, while the server stays frozen. The
// kopia mover used to give up the upload and then wait in closing the repository (kopia flushes
// its log blob under a context nothing cancels) until the server thawed.
func TestFrozenStorageEndsTheMoverProcess(t *testing.T) {
	for _, engine := range []string{EngineKopia, EngineArchive} {
		t.Run(engine, func(t *testing.T) {
			e, m, s3 := kopiaSetup(t, stallVolume(t))
			e[EnvEngine] = engine
			e[EnvIdleTimeout] = "3s"
			p := startBackupProcess(t, e)
			p.waitUntil(t, "its upload started", uploadStarted(s3, e))
			m.Freeze()
			defer m.Thaw()
			frozen := time.Now()
			res, ended := p.result(t, 3*time.Second+stallBound)
			if !ended {
				t.Fatalf("the mover still runs %v after S3 froze (idle timeout 3s)", time.Since(frozen).Round(time.Second))
			}
			t.Logf("the mover ended %v after S3 froze: %s: %s", time.Since(frozen).Round(100*time.Millisecond), res.Reason, res.Message)
			if res.Result != Failed || res.Reason != ReasonStorageStalled {
				t.Fatalf("backup into a frozen S3: %+v, want StorageStalled", res)
			}
		})
	}
}

// MinIO down in the middle of a kopia upload for longer than the retries of an S3 call (here
// about 12 s: kopia's, with minio-go's own cut to one, envMinIORetries; about 2 minutes by
// default), and back before the run ends: the backup fails as an S3 failure, not as a volume
// read failure. kopia records the files whose chunks it could not
// upload as entries it could not back up; the run used to fail VolumeReadFailed "read volume …:
// PutBlob … connection refused".
func TestStorageOutageMidUploadIsAStorageFailure(t *testing.T) {
	// One large file: its chunks are written, and their packs uploaded, by the file's own
	// upload, so the failed PutBlob is what kopia records against that file.
	src := t.TempDir()
	randomFile(t, filepath.Join(src, "disk.img"), 128<<20, 3)
	e, m, s3 := kopiaSetup(t, src)
	e[envMinIORetries] = "1"
	p := startBackupProcess(t, e)
	p.waitUntil(t, "its upload started", uploadStarted(s3, e))
	m.Outage(t, 30*time.Second)
	res, ended := p.result(t, 5*time.Minute)
	if !ended {
		t.Fatal("the mover still runs 5 minutes after S3 came back")
	}
	t.Logf("backup: %s: %s", res.Reason, res.Message)
	if res.Result != Failed || res.Reason != ReasonStorageFailed || strings.HasPrefix(res.Message, "read volume") {
		t.Fatalf("backup while S3 was down: %+v, want StorageFailed naming S3", res)
	}
}

// MinIO frozen in the middle of a restore, for both engines: the restore mover ends with
// StorageStalled within its idle timeout and a bound, while the server stays frozen. It used to
// wait for the server (or the Job's deadline: 6 hours by default).
func TestFrozenStorageEndsTheRestore(t *testing.T) {
	for _, engine := range []string{EngineKopia, EngineArchive} {
		t.Run(engine, func(t *testing.T) {
			e, m, _ := kopiaSetup(t, stallVolume(t))
			e[EnvEngine] = engine
			if res := Backup(context.Background(), e.get, "test"); res.Result != Succeeded {
				t.Fatalf("backup: %+v", res)
			}
			e[EnvTargetDir] = t.TempDir()
			e[EnvIdleTimeout] = "3s"
			p := startMoverProcess(t, "restore-result", e)
			p.waitUntil(t, "it wrote its first file", func() bool {
				entries, _ := os.ReadDir(e[EnvTargetDir])
				return len(entries) > 0
			})
			m.Freeze()
			defer m.Thaw()
			frozen := time.Now()
			res, ended := p.result(t, 3*time.Second+stallBound)
			if !ended {
				t.Fatalf("the restore still runs %v after S3 froze (idle timeout 3s)", time.Since(frozen).Round(time.Second))
			}
			t.Logf("the restore ended %v after S3 froze: %s: %s", time.Since(frozen).Round(100*time.Millisecond), res.Reason, res.Message)
			if res.Result != Failed || res.Reason != ReasonStorageStalled {
				t.Fatalf("restore from a frozen S3: %+v, want StorageStalled", res)
			}
		})
	}
}
