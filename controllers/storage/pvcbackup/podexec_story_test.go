package pvcbackup

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// The real PodExecutor, against the real API server: envtest has no kubelet, so no command runs,
// but what the API server answers proves that the request reaches the pod's subresource with
// the manager's credentials: a pod that is not there is "not found", a pod no node runs has "no
// host assigned" (the API server looked the pod up and would now dial its kubelet). The command
// and container parameters are read by the kubelet only: on a cluster (the e2e suite), not here.
func TestRealPodExecutorReachesThePodsExecAPI(t *testing.T) {
	w := storagetest.NewWorld(t)
	pod := w.AppPod("db-0", map[string]string{"app": "db"})
	exec := NewPodExecutor(cfg)
	ctx, cancel := context.WithTimeout(testCtx, 30*time.Second)
	defer cancel()

	var out bytes.Buffer
	_, err := exec.Exec(ctx, pod, "app", []string{"sh", "-c", "echo hi"}, &out)
	if err == nil || !strings.Contains(err.Error(), "does not have a host assigned") {
		t.Errorf("exec in a pod no node runs: %v, want the API server's \"does not have a host assigned\"", err)
	}
	gone := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "db-9"}}
	if _, err := exec.Exec(ctx, gone, "app", []string{"true"}, &out); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("exec in a missing pod: %v, want not found", err)
	}
}
