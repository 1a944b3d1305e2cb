package storagetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LocalKubelet stands in for the kubelet's side of pods/exec, which envtest lacks (no kubelet
// runs a pod): it runs the command as a real process of the test, in Dir, where the kubelet
// would run it in the pod's container. Like the kubelet it refuses a pod that is not running
// or has no such container, and the exec ends when its stream's context does (the process
// group is killed, as the stream's end leaves a real command to the container). The command
// finds the pod and container it stands in for in $POD_NAME and $CONTAINER_NAME.
type LocalKubelet struct {
	// Dir is the working directory of the commands: the pod's filesystem, for the story.
	Dir string
	mu  sync.Mutex
	// Execs is every exec the kubelet ran, in order.
	execs []Exec
}

// Exec is one command the LocalKubelet ran.
type Exec struct {
	Pod, Container string
	Command        []string
	ExitCode       int
	Err            error
}

// Exec runs command as a local process (pvcbackup.PodExec).
func (k *LocalKubelet) Exec(ctx context.Context, pod *corev1.Pod, container string, command []string, output io.Writer) (int, error) {
	current := &corev1.Pod{}
	if err := K8s.Get(ctx, client.ObjectKeyFromObject(pod), current); err != nil {
		return 0, err
	}
	if current.Status.Phase != corev1.PodRunning {
		return 0, fmt.Errorf("pod %s is %s, not running", pod.Name, current.Status.Phase)
	}
	found := false
	for _, c := range current.Spec.Containers {
		found = found || c.Name == container
	}
	if !found {
		return 0, fmt.Errorf("container %s is not valid for pod %s", container, pod.Name)
	}
	cmd := exec.CommandContext(ctx, command[0], command[1:]...)
	cmd.Dir = k.Dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "POD_NAME=" + pod.Name, "CONTAINER_NAME=" + container}
	cmd.Stdout, cmd.Stderr = output, output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	rec := Exec{Pod: pod.Name, Container: container, Command: command}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		err = ctx.Err()
	case errors.As(err, &exit):
		rec.ExitCode, err = exit.ExitCode(), nil
	}
	rec.Err = err
	k.mu.Lock()
	k.execs = append(k.execs, rec)
	k.mu.Unlock()
	return rec.ExitCode, err
}

// Execs is every exec the kubelet ran so far, in order.
func (k *LocalKubelet) Execs() []Exec {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]Exec(nil), k.execs...)
}

// AppPod creates a running pod of the application in the world's namespace, with the labels
// and the containers "app" and "sidecar", as the scheduler and kubelet would report it.
func (w *World) AppPod(name string, labels map[string]string) *corev1.Pod {
	w.T.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}, {Name: "sidecar", Image: "sidecar:1"}}}}
	w.Must(K8s.Create(Ctx, pod))
	pod.Status.Phase = corev1.PodRunning
	w.Must(K8s.Status().Update(Ctx, pod))
	return pod
}
