package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinIO is a real MinIO server on loopback with a fresh data directory, for one test.
type MinIO struct {
	Endpoint  string // host:port
	AccessKey string
	SecretKey string
	cmd       *exec.Cmd
	dir       string
	exited    chan struct{} // closed when the server process has exited
	stopOnce  sync.Once
	log       *os.File
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
	// A free port is picked, closed and handed to MinIO: another process (a parallel test
	// package's API server, etcd or MinIO) can take it in between. MinIO then exits at once
	// saying so (and another test's MinIO may have answered our liveness check meanwhile: a
	// signed request with our keys tells), and the start is retried on new ports.
	for attempt := 1; ; attempt++ {
		m, log, err := startMinIO(t, bin)
		if err == nil {
			return m
		}
		if !strings.Contains(log, portInUse) || attempt == 3 {
			t.Fatalf("MinIO at %s: %v\n%s", m.Endpoint, err, log)
		}
		t.Logf("MinIO at %s: its port was taken meanwhile (%v); starting it again on other ports", m.Endpoint, err)
	}
}

// portInUse is what MinIO logs when it exits because its address is taken.
const portInUse = "port is already in use"

// startMinIO starts one server and waits until it is live; on error it returns the server
// (stopped) and its log.
func startMinIO(t testing.TB, bin string) (*MinIO, string, error) {
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
	m.log = logFile
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("start MinIO: %v", err)
	}
	m.exited = make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(m.exited) }()
	t.Cleanup(m.Stop)
	if err := m.waitLive(30 * time.Second); err != nil {
		m.Stop()
		log, _ := os.ReadFile(filepath.Join(m.dir, "minio.log"))
		return m, string(log), err
	}
	if err := m.answersWithOurKeys(); err != nil {
		// Another test's MinIO took the port first and answered the liveness check; ours is
		// exiting (or has exited) saying the port is in use.
		m.Stop()
		return m, portInUse + " (another server answered: " + err.Error() + ")", err
	}
	return m, "", nil
}

// answersWithOurKeys makes one signed request with this server's root keys: a server that does
// not know them is another one on the same port.
func (m *MinIO) answersWithOurKeys() error {
	c, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.ListBuckets(ctx)
	return err
}

// waitLive polls the liveness endpoint, giving up early when the server exits (a bad flag or a
// taken port would otherwise cost the whole timeout).
func (m *MinIO) waitLive(timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := client.Get("http://" + m.Endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("health check answered %s", resp.Status)
		}
		select {
		case <-m.exited:
			return fmt.Errorf("the server exited during startup (%v)", m.cmd.ProcessState)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not live within %v: %w", timeout, err)
		}
	}
}

// Stop kills the server and anything it started (its process group), waits for it and removes
// its data. Tests call it to take the endpoint away mid-test; it also runs at cleanup, and a
// second call does nothing.
func (m *MinIO) Stop() {
	m.stopOnce.Do(func() {
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		m.Thaw() // a stopped process dies of SIGKILL too, but let nothing wait on it
		<-m.exited
		m.log.Close()
		_ = os.RemoveAll(filepath.Join(m.dir, "data"))
	})
}

// Outage takes the server down for d, as a crash or a network outage would: it kills it
// (connections are refused meanwhile), keeps its data, and starts it again on the same address.
// It returns once the server is live again.
func (m *MinIO) Outage(t testing.TB, d time.Duration) {
	t.Helper()
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
	<-m.exited
	time.Sleep(d)
	cmd := exec.Command(m.cmd.Path, m.cmd.Args[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr, cmd.SysProcAttr = m.cmd.Env, m.log, m.log, m.cmd.SysProcAttr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start MinIO again: %v", err)
	}
	m.cmd, m.exited = cmd, make(chan struct{})
	exited := m.exited
	go func() { _ = cmd.Wait(); close(exited) }()
	if err := m.waitLive(30 * time.Second); err != nil {
		t.Fatalf("MinIO at %s after the outage: %v", m.Endpoint, err)
	}
}

// Freeze stops the server (SIGSTOP to its process group) without closing its connections: a
// frozen dependency, which accepts bytes into socket buffers and answers nothing. Thaw resumes it.
func (m *MinIO) Freeze() { _ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGSTOP) }

// Thaw resumes a frozen server.
func (m *MinIO) Thaw() { _ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGCONT) }

// freeAddr returns a loopback address with a port nothing listens on right now (a variable: the
// test of the retry hands out a taken one).
var freeAddr = func(t testing.TB) string {
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
