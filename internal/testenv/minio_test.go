package testenv

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestMinIOStartsAndStops(t *testing.T) {
	m := StartMinIO(t)
	if host, _, err := net.SplitHostPort(m.Endpoint); err != nil || host != "127.0.0.1" {
		t.Errorf("Endpoint %q is not on 127.0.0.1 (%v)", m.Endpoint, err)
	}
	if m.AccessKey == "" || len(m.SecretKey) < 8 {
		t.Errorf("credentials %q/%q are unusable (MinIO needs an 8+ character secret)", m.AccessKey, m.SecretKey)
	}
	if other := StartMinIO(t); other.SecretKey == m.SecretKey || other.Endpoint == m.Endpoint {
		t.Errorf("two servers share an endpoint or a secret: %s %s", m.Endpoint, other.Endpoint)
	}
	resp, err := http.Get("http://" + m.Endpoint + "/minio/health/live")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	m.Stop()
	m.Stop() // idempotent, and cleanup calls it again
	if _, err := (&http.Client{Timeout: time.Second}).Get("http://" + m.Endpoint + "/minio/health/live"); err == nil {
		t.Error("the server still answers after Stop")
	}
	if _, err := os.Stat(filepath.Join(m.dir, "data")); !os.IsNotExist(err) {
		t.Errorf("the data directory survived Stop: %v", err)
	}
}

// fatalTB records a Fatal instead of failing the real test, so the failure path can be checked.
type fatalTB struct {
	*testing.T
	msg string
}

func (f *fatalTB) Fatal(args ...any) { f.msg = fmt.Sprint(args...); runtime.Goexit() }
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestMissingMinIOBinaryFailsWithTheFix(t *testing.T) {
	t.Setenv("MINIO_BINARY", filepath.Join(t.TempDir(), "no-such-minio"))
	f := &fatalTB{T: t}
	done := make(chan *MinIO)
	go func() {
		var m *MinIO
		defer func() { done <- m }()
		m = StartMinIO(f)
	}()
	if m := <-done; m != nil {
		t.Fatal("StartMinIO returned a server for a missing binary")
	}
	if !strings.Contains(f.msg, "hack/envtest-assets.sh minio") || !strings.Contains(f.msg, "make test") {
		t.Errorf("failure message %q does not say how to build the binary", f.msg)
	}
}

// A port taken between freeAddr and MinIO's bind (by a parallel test package's server) makes
// MinIO exit at once: StartMinIO starts it again on other ports instead of failing the test.
func TestMinIOStartsAgainWhenItsPortWasTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	pick := freeAddr
	t.Cleanup(func() { freeAddr = pick })
	calls := 0
	freeAddr = func(t testing.TB) string {
		calls++
		if calls == 1 {
			return taken.Addr().String() // the API address of the first attempt
		}
		return pick(t)
	}
	m := StartMinIO(t)
	if m.Endpoint == taken.Addr().String() {
		t.Fatalf("StartMinIO returned the server on the taken address %s", m.Endpoint)
	}
	if calls != 4 {
		t.Errorf("freeAddr called %d times, want 4 (two addresses per attempt, two attempts)", calls)
	}
	resp, err := http.Get("http://" + m.Endpoint + "/minio/health/live")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}
