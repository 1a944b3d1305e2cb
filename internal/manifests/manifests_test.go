package manifests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/okgoes/okgoes-operator/internal/testenv"
)

// build runs `kustomize build config/<dir>` through the kustomize library.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(root, "config", dir))
	if err != nil {
		t.Fatalf("kustomize build config/%s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, u)
	}
	return objs
}

func find(objs []*unstructured.Unstructured, kind, nameSuffix string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && strings.HasSuffix(o.GetName(), nameSuffix) {
			return o
		}
	}
	return nil
}

func TestDefaultDeploysOnARealAPIServer(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// No CRDs preinstalled: the kustomize output must bring its own.
	env, cfg, err := testenv.StartEmpty(scheme)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	objs := build(t, "default")
	// What `make deploy` does: server-side apply of everything, CRDs and namespace first.
	for _, first := range []bool{true, false} {
		for _, o := range objs {
			isFirst := o.GetKind() == "CustomResourceDefinition" || o.GetKind() == "Namespace"
			if isFirst != first {
				continue
			}
			if err := c.Patch(ctx, o.DeepCopy(), client.Apply, client.FieldOwner("test"), client.ForceOwnership); err != nil {
				t.Errorf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}

	// The manager's pod passes the restricted Pod Security Standard its namespace enforces.
	u := find(objs, "Deployment", "controller-manager")
	if u == nil {
		t.Fatal("no manager Deployment in config/default")
	}
	dep := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, dep); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: dep.Namespace}, ns); err != nil {
		t.Fatal(err)
	}
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace %s does not enforce the restricted standard: %v", ns.Name, ns.Labels)
	}
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: dep.ObjectMeta}); err != nil && !strings.Contains(err.Error(), "exists") {
		t.Fatal(err)
	}
	pod := &corev1.Pod{Spec: dep.Spec.Template.Spec}
	pod.Namespace, pod.Name = dep.Namespace, "manager-from-template"
	if err := c.Create(ctx, pod); err != nil {
		t.Errorf("the manager pod violates the restricted Pod Security Standard: %v", err)
	}
	args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"--leader-elect", "--metrics-bind-address=:8443"} {
		if !strings.Contains(args, want) {
			t.Errorf("manager args %q lack %s", args, want)
		}
	}
}

func TestManagerRBACHasNoWildcards(t *testing.T) {
	for _, o := range build(t, "rbac") {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		role := &rbacv1.ClusterRole{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, role); err != nil {
			t.Fatal(err)
		}
		for _, r := range role.Rules {
			for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.NonResourceURLs} {
				for _, v := range list {
					if strings.Contains(v, "*") {
						t.Errorf("%s %s has a wildcard rule: %+v", o.GetKind(), o.GetName(), r)
					}
				}
			}
		}
	}
}

func TestAlertsAreTheDesignsTwo(t *testing.T) {
	objs := build(t, "prometheus")
	rule := find(objs, "PrometheusRule", "alerts")
	if rule == nil {
		t.Fatal("no PrometheusRule in config/prometheus")
	}
	text := fmt.Sprint(rule.Object)
	for _, want := range []string{`result="error"`, "[5m]", "> 0.01", "workqueue_depth", "> 100", "for:5m", "runbook_url:"} {
		if !strings.Contains(text, want) {
			t.Errorf("PrometheusRule lacks %q", want)
		}
	}
	root, _ := testenv.RepoRoot()
	runbooks, err := os.ReadFile(filepath.Join(root, "docs", "alerts.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, anchor := range []string{"OkgoesOperatorReconcileErrors", "OkgoesOperatorWorkqueueBacklog"} {
		if !strings.Contains(string(runbooks), "## "+anchor) {
			t.Errorf("docs/alerts.md has no runbook section for %s", anchor)
		}
	}
}
