package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// server is bin/minio on loopback, with its data under the work directory. testenv.StartMinIO
// needs a testing.TB, so the benchmark starts the binary itself the same way.
type server struct {
	endpoint, accessKey, secretKey string
	cmd                            *exec.Cmd
	client                         *minio.Client
}

func startMinIO(bin, dir string) (*server, error) {
	s := &server{endpoint: freeAddr(), accessKey: "bench-access", secretKey: "bench-secret-key-0123"}
	s.cmd = exec.Command(bin, "server", "--quiet", "--address", s.endpoint, "--console-address", freeAddr(), filepath.Join(dir, "data"))
	s.cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+s.accessKey, "MINIO_ROOT_PASSWORD="+s.secretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "HOME="+dir)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	log, err := os.Create(filepath.Join(dir, "minio.log"))
	if err != nil {
		return nil, err
	}
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(60 * time.Second); ; {
		resp, err := hc.Get("http://" + s.endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("MinIO at %s not live: %v", s.endpoint, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.client, err = minio.New(s.endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.accessKey, s.secretKey, "")})
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// stop kills the server's process group.
func (s *server) stop() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
}

// prefixBytes is the size of every object under prefix in bucket.
func (s *server) prefixBytes(ctx context.Context, bucket, prefix string) (int64, error) {
	var n int64
	for o := range s.client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return 0, o.Err
		}
		n += o.Size
	}
	return n, nil
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}
