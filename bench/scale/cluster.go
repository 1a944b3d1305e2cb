package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// managerUser is the name the manager authenticates as: its requests are the ones counted.
const managerUser = "okgoes-manager"

// controlPlane is etcd + kube-apiserver (envtest, binaries from bin/k8s) with an audit log.
type controlPlane struct {
	env        *envtest.Environment
	cfg        *rest.Config // the harness's own admin user
	kubeconfig string       // the manager's
	audit      *auditLog
}

func startControlPlane(assets, crds, dir string) (*controlPlane, error) {
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "audit.log")
	env := &envtest.Environment{BinaryAssetsDirectory: assets, CRDDirectoryPaths: []string{crds}, ErrorIfCRDPathMissing: true}
	api := env.ControlPlane.GetAPIServer()
	api.Configure().
		Set("audit-policy-file", policy).
		Set("audit-log-path", logPath).
		Set("audit-log-format", "json").
		Set("audit-log-maxsize", "0").                 // never rotate: the harness reads one file
		Set("service-cluster-ip-range", "10.0.0.0/16") // envtest's /24 holds 254 Services: too few caches
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("start kube-apiserver + etcd: %w", err)
	}
	cfg.QPS, cfg.Burst = -1, 0 // the harness is not what is measured: no client-side throttling
	user, err := env.AddUser(envtest.User{Name: managerUser, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	data, err := user.KubeConfig()
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "manager.kubeconfig")
	if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &controlPlane{env: env, cfg: cfg, kubeconfig: kubeconfig, audit: &auditLog{path: logPath, user: managerUser}}, nil
}

func (c *controlPlane) stop() {
	if err := c.env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop control plane:", err)
	}
}

// managerProcess is the manager binary, run as in a cluster but outside it.
type managerProcess struct {
	cmd         *exec.Cmd
	metricsAddr string
	exited      chan struct{}
}

func startManager(bin, kubeconfig, namespace, dir string, extra []string) (*managerProcess, error) {
	m := &managerProcess{metricsAddr: freeAddr(), exited: make(chan struct{})}
	webhookPort := strings.Split(freeAddr(), ":")[1]
	args := append([]string{
		"--metrics-bind-address=" + m.metricsAddr, "--metrics-secure=false",
		"--health-probe-bind-address=" + freeAddr(),
		"--mover-image=example.invalid/okgoes-operator:scale",
		"--webhook-certs=self-signed", "--webhook-port=" + webhookPort,
		"--webhook-url=https://localhost:" + webhookPort + "/convert",
		"--webhook-cert-dir=" + filepath.Join(dir, "webhook-certs"),
	}, extra...)
	m.cmd = exec.Command(bin, args...)
	m.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "POD_NAMESPACE="+namespace)
	log, err := os.Create(filepath.Join(dir, "manager.log"))
	if err != nil {
		return nil, err
	}
	m.cmd.Stdout, m.cmd.Stderr = log, log
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start manager %s: %w", bin, err)
	}
	go func() { _ = m.cmd.Wait(); log.Close(); close(m.exited) }()
	return m, nil
}

func (m *managerProcess) stop() {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		<-m.exited
	}
}

// alive is an error once the manager has exited.
func (m *managerProcess) alive() error {
	select {
	case <-m.exited:
		return fmt.Errorf("the manager exited (%v): see manager.log", m.cmd.ProcessState)
	default:
		return nil
	}
}

// metrics reads the manager's Prometheus metrics: sum of each family over its label sets, and
// the reconcile totals per controller.
func (m *managerProcess) metrics() (map[string]float64, error) {
	if err := m.alive(); err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + m.metricsAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name := line[:i]
		family := name
		if j := strings.IndexByte(name, '{'); j >= 0 {
			family = name[:j]
			if family == "controller_runtime_reconcile_total" {
				if c := label(name, "controller"); c != "" {
					out[family+"/"+c] += v
				}
			}
		}
		out[family] += v
	}
	return out, sc.Err()
}

func label(series, name string) string {
	i := strings.Index(series, name+`="`)
	if i < 0 {
		return ""
	}
	rest := series[i+len(name)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}

// rss is the manager's resident set (VmRSS) and its peak (VmHWM), in bytes.
func (m *managerProcess) rss() (cur, peak int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			cur = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return cur, peak
}

// minioServer is bin/minio on loopback behind a proxy that counts the S3 requests reaching it.
type minioServer struct {
	endpoint, accessKey, secretKey string // endpoint: the counting proxy's
	cmd                            *exec.Cmd
	client                         *minio.Client
	proxy                          *http.Server
	mu                             sync.Mutex
	calls                          map[string]int // "METHOD bucket|object"
}

func startMinIO(bin, dir string) (*minioServer, error) {
	s := &minioServer{accessKey: "scale-access", secretKey: "scale-secret-key-0123", calls: map[string]int{}}
	addr := freeAddr()
	s.cmd = exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", freeAddr(), filepath.Join(dir, "minio-data"))
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
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := hc.Get("http://" + addr + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("MinIO at %s not live: %v", addr, err)
		}
	}
	// The proxy keeps the Host header: SigV4 signs it, and MinIO checks it.
	target := &url.URL{Scheme: "http", Host: addr}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host
	}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.stop()
		return nil, err
	}
	s.endpoint = l.Addr().String()
	s.proxy = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		what := "object"
		if strings.Count(strings.Trim(r.URL.Path, "/"), "/") == 0 {
			what = "bucket"
		}
		s.mu.Lock()
		s.calls[r.Method+" "+what]++
		s.mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = s.proxy.Serve(l) }()
	s.client, err = minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(s.accessKey, s.secretKey, "")})
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// counts returns a copy of the S3 calls counted so far.
func (s *minioServer) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

func (s *minioServer) stop() {
	if s.proxy != nil {
		_ = s.proxy.Close()
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
}

func (s *minioServer) makeBucket(ctx context.Context, name string) error {
	return s.client.MakeBucket(ctx, name, minio.MakeBucketOptions{})
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// diffCounts is after - before, per key.
func diffCounts(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
