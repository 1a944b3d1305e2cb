//go:build e2e

package e2e

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// eventually polls check every half second until it reports done, and fails the test with what
// check last saw when limit passes. It is a bounded wait, not a timing assertion: limits are
// generous, and only the final state is judged.
func eventually(t *testing.T, what string, limit time.Duration, check func() (done bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		done, state := check()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s; last seen: %s", what, limit, state)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// namespace creates a namespace for one test. At the end it dumps the namespace (objects, events,
// pod logs) and the operator when the test failed, then deletes it and waits until it is gone, so
// that a sequential test after it starts on a quiet operator (the tests alongside run last).
func namespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + randomSuffix()}}
	must(t, k8s.Create(ctx, ns))
	t.Cleanup(func() {
		if t.Failed() {
			dumpNamespace(t, ns.Name)
		}
		if os.Getenv("E2E_KEEP_NAMESPACES") == "1" {
			return
		}
		if err := k8s.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", ns.Name, err)
			return
		}
		eventually(t, "namespace "+ns.Name+" deleted", 3*time.Minute, func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	})
	return ns.Name
}

// object reads a YAML document into an unstructured object: the tests use the custom resources the
// way a user writes them, not through the Go types.
func object(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	data, err := yaml.YAMLToJSON([]byte(doc))
	must(t, err)
	u := &unstructured.Unstructured{}
	must(t, u.UnmarshalJSON(data)) // integers stay int64, as from the API server
	return u
}

// sample reads a file of config/samples.
func sample(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(cfg.root, "config", "samples", name))
	must(t, err)
	return object(t, string(data))
}

func get(t *testing.T, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(u.GroupVersionKind())
	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(u), got))
	return got
}

func str(u *unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
	if s == nil {
		return ""
	}
	return fmt.Sprint(s)
}

// condition returns status, reason and message of the condition of type typ.
func condition(u *unstructured.Unstructured, typ string) (status, reason, message string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			return fmt.Sprint(m["status"]), fmt.Sprint(m["reason"]), fmt.Sprint(m["message"])
		}
	}
	return "", "", ""
}

func statusJSON(u *unstructured.Unstructured) string {
	b, _ := yaml.Marshal(u.Object["status"])
	return string(b)
}

// runPod runs a one-shot pod of the tools image to completion and returns its log.
func runPod(t *testing.T, ns, name, script string, volumes []corev1.Volume, mounts []corev1.VolumeMount) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			AutomountServiceAccountToken:  ptr.To(false),
			Volumes:                       volumes,
			Containers: []corev1.Container{{
				Name: "main", Image: cfg.toolsImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", script}, VolumeMounts: mounts,
			}},
		},
	}
	must(t, k8s.Create(ctx, pod))
	eventually(t, "pod "+name+" finished", 3*time.Minute, func() (bool, string) {
		got := &corev1.Pod{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return false, err.Error()
		}
		if got.Status.Phase == corev1.PodFailed {
			out, _ := kubectl("-n", ns, "logs", name)
			t.Fatalf("pod %s failed:\n%s", name, out)
		}
		return got.Status.Phase == corev1.PodSucceeded, string(got.Status.Phase)
	})
	out, err := kubectl("-n", ns, "logs", name)
	if err != nil {
		t.Fatalf("logs of %s: %v\n%s", name, err, out)
	}
	return out
}

func claimVolume(claim string, readOnly bool) ([]corev1.Volume, []corev1.VolumeMount) {
	return []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
			ClaimName: claim, ReadOnly: readOnly}}}},
		[]corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: readOnly}}
}

// volumeFor makes the PersistentVolume that claim ns/claim will bind to, when the suite runs with
// static volumes (no E2E_STORAGE_CLASS): a hostPath directory on the node, pre-bound to the claim,
// owned by owner (uid:gid). hostPath volumes ignore fsGroup, so a volume the non-root mover restores
// into is handed to its uid, as an administrator would. With a storage class there is nothing to
// do: the provisioner makes the volume.
func volumeFor(t *testing.T, ns, claim, owner string) {
	t.Helper()
	volumeOfSize(t, ns, claim, owner, "1Gi")
}

// volumeOfSize is volumeFor with a capacity other than 1Gi (a hostPath volume holds what the
// node's disk has room for; the capacity only lets a larger claim bind).
func volumeOfSize(t *testing.T, ns, claim, owner, size string) {
	t.Helper()
	if cfg.storageClass != "" {
		return
	}
	dir := ns + "-" + claim
	hostPathType := corev1.HostPathDirectoryOrCreate
	runPod(t, ns, "mkdir-"+claim, fmt.Sprintf("mkdir -p /volumes/%s && chown %s /volumes/%s", dir, owner, dir),
		[]corev1.Volume{{Name: "volumes", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: cfg.hostPathDir, Type: &hostPathType}}}},
		[]corev1.VolumeMount{{Name: "volumes", MountPath: "/volumes"}})
	directory := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + dir},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: claim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: cfg.hostPathDir + "/" + dir, Type: &directory}},
		},
	}
	must(t, k8s.Create(ctx, pv))
	t.Cleanup(func() {
		if err := k8s.Delete(ctx, pv); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s: %v", pv.Name, err)
		}
	})
}

// claim creates a 1Gi ReadWriteOnce PVC (and its volume, see volumeFor) and waits until it is bound.
func claim(t *testing.T, ns, name string) {
	t.Helper()
	volumeFor(t, ns, name, "0:0")
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if cfg.storageClass != "" {
		pvc.Spec.StorageClassName = ptr.To(cfg.storageClass)
	} else {
		pvc.Spec.StorageClassName = ptr.To("") // only the static volume made above
	}
	must(t, k8s.Create(ctx, pvc))
	if cfg.storageClass == "" { // a WaitForFirstConsumer class binds only when a pod uses the claim
		eventually(t, "PVC "+name+" bound", time.Minute, func() (bool, string) {
			got := &corev1.PersistentVolumeClaim{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(pvc), got); err != nil {
				return false, err.Error()
			}
			return got.Status.Phase == corev1.ClaimBound, string(got.Status.Phase)
		})
	}
}

// portForward forwards a local port on 127.0.0.1 to port of pod ns/pod through the API server
// and the kubelet (kubectl port-forward) for the rest of the test, and returns host:port.
func portForward(t *testing.T, ns, pod string, port int) string {
	t.Helper()
	addr, stop, err := startPortForward(ns, pod, port)
	must(t, err)
	t.Cleanup(stop)
	return addr
}

// startPortForward starts kubectl port-forward; stop ends it.
func startPortForward(ns, pod string, port int) (addr string, stop func(), err error) {
	cmd := exec.Command(cfg.kubectl, "-n", ns, "port-forward", "--address", "127.0.0.1", "pod/"+pod, fmt.Sprintf(":%d", port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+)`).FindStringSubmatch(sc.Text()); m != nil {
				lines <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case addr := <-lines:
		return addr, stop, nil
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, fmt.Errorf("kubectl port-forward to %s/%s:%d did not start: %s", ns, pod, port, stderr.String())
	}
}

// podsOf lists the pods of ns matching the label selector.
func podsOf(t *testing.T, ns string, labels map[string]string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	must(t, k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(labels)))
	return pods.Items
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// alongside marks a test that may run beside the other such tests (see the package doc).
func alongside(t *testing.T) {
	t.Helper()
	t.Parallel()
}
