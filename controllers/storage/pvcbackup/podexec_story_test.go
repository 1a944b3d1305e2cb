package pvcbackup

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
)

// The real PodExecutor, against the real API server: envtest has no kubelet, so no command runs,
// but what the API server answers proves that the request reaches the pod's subresource with
// the manager's rights: a pod that is not there is "not found", a pod no node runs has "no
// host assigned" (the API server authorized the exec, looked the pod up and would now dial its
// kubelet). The executor runs as a user bound to nothing but the manager's ClusterRole as
// controller-gen generates it (config/rbac/role.yaml, the one the bundle ships): the WebSocket
// exec is a GET, which the API server authorizes as get on pods/exec (and, from Kubernetes 1.35,
// create too), so a role with create alone is refused ("cannot get resource pods/exec", seen on
// real pods before the role had get). The command and container parameters are read by the
// kubelet only: on a cluster (the e2e suite), not here.
func TestRealPodExecutorReachesThePodsExecAPI(t *testing.T) {
	w := storagetest.NewWorld(t)
	pod := w.AppPod("db-0", map[string]string{"app": "db"})
	exec := NewPodExecutor(asManager(t))
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

// asManager is cfg impersonating a user bound to the manager's ClusterRole of
// config/rbac/role.yaml and to nothing else.
func asManager(t *testing.T) *rest.Config {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		t.Fatal(err)
	}
	user := "okgoes-manager-" + strings.ToLower(t.Name())
	role.ObjectMeta = metav1.ObjectMeta{Name: user}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := k8s.Create(testCtx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(testCtx, obj) })
	}
	manager := rest.CopyConfig(cfg)
	manager.Impersonate = rest.ImpersonationConfig{UserName: user}
	return manager
}
