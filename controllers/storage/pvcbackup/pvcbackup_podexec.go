package pvcbackup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// PodExecutor is the PodExec of the real operator: the pods/exec subresource of the API server,
// over WebSocket, or SPDY for an API server that does not upgrade to WebSocket (before 1.30), as
// kubectl exec does. It needs create on pods/exec (docs/application-backups.md, RBAC).
type PodExecutor struct {
	config *rest.Config
}

// NewPodExecutor execs with the manager's own rest.Config (its service account).
func NewPodExecutor(config *rest.Config) *PodExecutor {
	return &PodExecutor{config: rest.CopyConfig(config)}
}

// Exec implements PodExec. No stdin, no TTY: the command's stdout and stderr both go to output.
func (e *PodExecutor) Exec(ctx context.Context, pod *corev1.Pod, container string, command []string, output io.Writer) (int, error) {
	u, err := execURL(e.config, pod, container, command)
	if err != nil {
		return 0, err
	}
	ws, err := remotecommand.NewWebSocketExecutor(e.config, "GET", u.String())
	if err != nil {
		return 0, fmt.Errorf("pods/exec over WebSocket: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(e.config, "POST", u)
	if err != nil {
		return 0, fmt.Errorf("pods/exec over SPDY: %w", err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return 0, err
	}
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: output, Stderr: output})
	var exit utilexec.CodeExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		return exit.ExitStatus(), nil
	case ctx.Err() != nil:
		return 0, ctx.Err()
	}
	return 0, err
}

// execURL is the pods/exec URL of container in pod running command.
func execURL(config *rest.Config, pod *corev1.Pod, container string, command []string) (*url.URL, error) {
	base, _, err := rest.DefaultServerUrlFor(config)
	if err != nil {
		return nil, err
	}
	u := *base
	u.Path = path.Join(u.Path, "/api/v1/namespaces", pod.Namespace, "pods", pod.Name, "exec")
	q := url.Values{"container": {container}, "stdout": {"true"}, "stderr": {"true"}}
	for _, c := range command {
		q.Add("command", c)
	}
	u.RawQuery = q.Encode()
	return &u, nil
}
