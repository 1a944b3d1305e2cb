package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// MinIO is a real MinIO server on loopback with a fresh data directory, for one test.
type MinIO struct {
	Endpoint  string // host:port
	AccessKey string
	SecretKey string
	cmd       *exec.Cmd
	dir       string
}

// StartMinIO starts bin/minio (or $MINIO_BINARY) for the test and stops it, removing its data,
// when the test ends. It fails, rather than skips, when the binary is missing.
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	bin := os.Getenv("MINIO_BINARY")
	if bin == "" {
		root, err := RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		bin = filepath.Join(root, "bin", "minio")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("MinIO server not found at %s: run `make test` (or hack/envtest-assets.sh minio) to build it", bin)
	}
	m := &MinIO{Endpoint: freeAddr(t), AccessKey: "okgoes-" + randomHex(t, 4), SecretKey: randomHex(t, 16), dir: t.TempDir()}
	m.cmd = exec.Command(bin, "server", "--quiet", "--address", m.Endpoint, "--console-address", freeAddr(t), filepath.Join(m.dir, "data"))
	m.cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+m.AccessKey, "MINIO_ROOT_PASSWORD="+m.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "HOME="+m.dir)
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logFile, err := os.Create(filepath.Join(m.dir, "minio.log"))
	if err != nil {
		t.Fatal(err)
	}
	m.cmd.Stdout, m.cmd.Stderr = logFile, logFile
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("start MinIO: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		_ = m.cmd.Wait()
		logFile.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + m.Endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return m
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(m.dir, "minio.log"))
			t.Fatalf("MinIO did not become live within 30s: %v\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
