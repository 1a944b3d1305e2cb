// Command devcluster is what `make run` runs: it installs the CRDs and runs the manager against
// the cluster of $KUBECONFIG, or, when there is none, against a local control plane
// (kube-apiserver + etcd from bin/k8s, on loopback) that it starts and, on Ctrl-C, stops and
// removes again.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func main() {
	manager := flag.String("manager", "bin/manager", "manager binary to run")
	assets := flag.String("assets", "bin/k8s", "directory with kube-apiserver, etcd and kubectl")
	crds := flag.String("crds", "config/crd/bases", "directory of the CRDs to install")
	flag.Parse()
	if err := run(*manager, *assets, *crds, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "devcluster:", err)
		os.Exit(1)
	}
}

func run(manager, assets, crds string, managerArgs []string) error {
	// Catch Ctrl-C from the start: the manager child gets it from the terminal too, and we stop
	// the control plane only after it has exited.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)

	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig != "" {
		if _, err := os.Stat(kubeconfig); err != nil {
			return fmt.Errorf("KUBECONFIG=%s: %w", kubeconfig, err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return err
		}
		if err := installCRDs(cfg, crds); err != nil {
			return err
		}
		fmt.Printf("Running the manager against the cluster of KUBECONFIG=%s (Ctrl-C stops it).\n", kubeconfig)
		certDir, err := os.MkdirTemp("", "okgoes-webhook-certs-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(certDir)
		return runManager(manager, kubeconfig, certDir, managerArgs, signals)
	}

	tmp, err := os.MkdirTemp("", "okgoes-devcluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{crds},
		ErrorIfCRDPathMissing: true,
	}
	fmt.Println("No KUBECONFIG: starting a local control plane (kube-apiserver + etcd on 127.0.0.1) ...")
	if _, err := env.Start(); err != nil {
		_ = env.Stop() // a failed start (e.g. a CRD rejected) can leave etcd and the API server running
		return fmt.Errorf("start local control plane: %w", err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "devcluster: stop control plane:", err)
		}
		fmt.Println("Local control plane stopped and removed.")
	}()
	user, err := env.AddUser(envtest.User{Name: "developer", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	data, err := user.KubeConfig()
	if err != nil {
		return err
	}
	kubeconfig = filepath.Join(tmp, "kubeconfig")
	if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
		return err
	}
	kubectl := filepath.Join(assets, "kubectl")
	if rel, err := filepath.Rel(mustGetwd(), kubectl); err == nil {
		kubectl = rel
	}
	fmt.Printf(`
Local control plane is up. In another terminal:

  export KUBECONFIG=%s
  %s apply -f config/samples/
  %s get rediscaches -w

The manager's metrics: curl http://127.0.0.1:8080/metrics
Ctrl-C stops the manager and the control plane, and removes %s.

`, kubeconfig, kubectl, kubectl, tmp)
	return runManager(manager, kubeconfig, filepath.Join(tmp, "webhook-certs"), managerArgs, signals)
}

func installCRDs(cfg *rest.Config, dir string) error {
	_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{dir}, ErrorIfPathMissing: true})
	return err
}

// runManager runs the manager until it exits or a signal arrives, in which case the manager is
// asked to stop and waited for.
func runManager(manager, kubeconfig, certDir string, args []string, signals <-chan os.Signal) error {
	args = append([]string{
		"--metrics-bind-address=127.0.0.1:8080", "--metrics-secure=false",
		"--health-probe-bind-address=127.0.0.1:8081",
		// No kubelet runs here; the Jobs would use the image `make docker-build` produces.
		"--mover-image=" + envOr("RELATED_IMAGE_MOVER", "quay.io/okgoes/okgoes-operator:v0.2.0"),
		// The API server calls the conversion webhook (RedisCache v1alpha1 <-> v1beta1) on this
		// machine: the manager makes its own certificate and points the CRD at itself. That
		// needs an API server that can reach localhost (the local control plane, or a cluster
		// on this machine); for a remote cluster use `make deploy`.
		"--webhook-certs=self-signed", "--webhook-port=9443", "--webhook-url=https://localhost:9443/convert",
		"--webhook-cert-dir=" + certDir,
	}, args...)
	cmd := exec.Command(manager, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "POD_NAMESPACE="+envOr("POD_NAMESPACE", "default"))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// Its own process group: Ctrl-C reaches only us, and the manager gets exactly one SIGTERM
	// (a second signal would make controller-runtime exit at once, skipping its shutdown).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return err
	case sig := <-signals:
		fmt.Printf("\n%s: stopping the manager ...\n", sig)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err := <-exited
		var exit *exec.ExitError
		if errors.As(err, &exit) && !exit.Exited() { // ended by our signal
			return nil
		}
		return err
	}
}

func mustGetwd() string {
	wd, _ := os.Getwd()
	return wd
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
