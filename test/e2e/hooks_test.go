//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestBackupHookThatHangsEndsAtItsTimeoutAndThaws: hooks run through the real pods/exec API and
// kubelet. An application pod is "frozen" by a before-hook that writes a mark and then never
// returns (sleep 3600, timeout 5s); the run ends Failed with HookTimedOut at that timeout, no
// backup is written, and the after-hook ("thaw") has run in the same pod all the same: the pod's
// file holds "frozen" then "thawed", and the status records both hooks. Then the hang is removed
// and the next run makes a backup with the hooks around it in order.
func TestBackupHookThatHangsEndsAtItsTimeoutAndThaws(t *testing.T) {
	alongside(t)
	ns := namespace(t, "e2e-hooks")
	// Hooks are opt-in per namespace, by a label only a cluster administrator can set.
	must(t, k8s.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"storage.okgoes.com/allow-hooks":"true"}}}`))))
	s3 := deployMinIO(t, ns)
	claim(t, ns, "data")
	app := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: map[string]string{"app": "frozen"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			AutomountServiceAccountToken:  ptr.To(false),
			Containers: []corev1.Container{{
				Name: "main", Image: cfg.toolsImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", "exec sleep 3600"},
			}},
		},
	}
	must(t, k8s.Create(ctx, app))
	eventually(t, "application pod running", 2*time.Minute, func() (bool, string) {
		got := &corev1.Pod{}
		must(t, k8s.Get(ctx, client.ObjectKeyFromObject(app), got))
		return got.Status.Phase == corev1.PodRunning, string(got.Status.Phase)
	})

	backup := object(t, fmt.Sprintf(`
apiVersion: storage.okgoes.com/v1
kind: PVCBackup
metadata: {name: frozen, namespace: %s}
spec:
  pvcName: data
  schedule: "0 2 * * *"
  trigger: {manual: hang}
  s3Bucket: %s
  engine: Archive
  s3:
    endpoint: %q
    insecure: true
    credentialsSecretRef: {name: %s}
  hooks:
    before:
    - selector: {matchLabels: {app: frozen}}
      command: [sh, -c, "echo frozen >> /tmp/state; exec sleep 3600"]
      timeout: 5s
    after:
    - selector: {matchLabels: {app: frozen}}
      command: [sh, -c, "echo thawed >> /tmp/state"]
`, ns, s3.bucket, s3.endpoint, s3.secret))
	must(t, k8s.Create(ctx, backup))
	// waitRun waits for the run of trigger to be recorded: a lastRun other than previous.
	waitRun := func(trigger, previous string) *unstructured.Unstructured {
		var got *unstructured.Unstructured
		eventually(t, "run "+trigger+" recorded", 3*time.Minute, func() (bool, string) {
			got = get(t, backup)
			return str(got, "status", "lastManualTrigger") == trigger && str(got, "status", "lastRun", "result") != "" &&
				str(got, "status", "lastRun", "id") != previous && str(got, "status", "activeRun") == "", statusJSON(got)
		})
		return got
	}
	state := func() string {
		out, err := kubectl("-n", ns, "exec", "app", "--", "cat", "/tmp/state")
		if err != nil {
			t.Fatalf("cat /tmp/state in the application pod: %v\n%s", err, out)
		}
		return strings.TrimSpace(out)
	}

	got := waitRun("hang", "")
	if r, reason := str(got, "status", "lastRun", "result"), str(got, "status", "lastRun", "reason"); r != "Failed" || reason != "HookTimedOut" {
		t.Fatalf("the run of a hanging before-hook: %s %s, want Failed HookTimedOut\n%s", r, reason, statusJSON(got))
	}
	hooks, _, _ := unstructured.NestedSlice(got.Object, "status", "lastRun", "hooks")
	var before, after map[string]any
	for _, h := range hooks {
		h := h.(map[string]any)
		switch h["phase"] {
		case "Before":
			before = h
		case "After":
			after = h
		}
	}
	if before == nil || before["reason"] != "HookTimedOut" || before["pod"] != "app" {
		t.Errorf("before-hook result %v: want HookTimedOut in pod app", before)
	}
	if after == nil || after["reason"] != nil || fmt.Sprint(after["exitCode"]) != "0" {
		t.Errorf("after-hook result %v: want exit code 0 (it must run when a before-hook fails)", after)
	}
	if d, err := time.ParseDuration(fmt.Sprint(before["duration"])); err != nil || d < 5*time.Second || d > 60*time.Second {
		t.Errorf("before-hook duration %v: want its 5s timeout (not the command's hour)", before["duration"])
	}
	if s := state(); s != "frozen\nthawed" {
		t.Errorf("the application pod's /tmp/state is %q: want frozen, then thawed by the after-hook", s)
	}
	if keys := s3.keys(t, ""); len(keys) != 0 {
		t.Errorf("a run whose before-hook failed wrote to the bucket: %v", keys)
	}

	t.Run("without the hang the hooks frame a backup", func(t *testing.T) {
		must(t, k8s.Patch(ctx, backup, client.RawPatch(types.MergePatchType, []byte(
			`{"spec":{"trigger":{"manual":"ok"},"hooks":{"before":[{"selector":{"matchLabels":{"app":"frozen"}},"command":["sh","-c","echo frozen-again >> /tmp/state"],"timeout":"5s"}]}}}`))))
		got := waitRun("ok", str(got, "status", "lastRun", "id"))
		if r := str(got, "status", "lastRun", "result"); r != "Succeeded" {
			t.Fatalf("run ok: %s\n%s", r, statusJSON(got))
		}
		if s := state(); s != "frozen\nthawed\nfrozen-again\nthawed" {
			t.Errorf("/tmp/state is %q: want the second run's before- and after-hook in order", s)
		}
		if keys := s3.keys(t, ""); len(keys) == 0 {
			t.Error("no backup in the bucket after a successful run")
		}
	})
}
