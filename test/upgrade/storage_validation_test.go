package upgrade

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// The storage CRDs of this branch refuse what the released ones admitted: bucket names that break
// the S3 naming rules and a retention whose every rule is 0. docs/upgrades.md says why that is
// safe for objects already stored; this is that claim, on a real API server: the released CRDs
// store such objects, the new CRDs replace them, OLM's upgrade check passes, and the objects stay
// writable (spec and status) until the offending field itself is edited.
func TestStricterStorageValidationKeepsStoredObjectsWritable(t *testing.T) {
	env, k8s, root := startAPIServer(t)
	ctx := context.Background()

	applyStorageCRDs(t, ctx, k8s, env, filepath.Join(root, "releases", "0.3.0", "manifests"))
	stored := storedBackup()
	if err := k8s.Create(ctx, stored); err != nil {
		t.Fatalf("the released CRD refuses the object this story is about: %v", err)
	}

	crds := applyStorageCRDs(t, ctx, k8s, env, filepath.Join(root, "config", "crd", "bases"))

	// OLM validates the stored objects against the new OpenAPI schema before it upgrades a CRD.
	for _, crd := range crds {
		if crd.Spec.Names.Kind != "PVCBackup" {
			continue
		}
		internal := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, internal, nil); err != nil {
			t.Fatal(err)
		}
		validator, _, err := validation.NewSchemaValidator(internal)
		if err != nil {
			t.Fatal(err)
		}
		current := &unstructured.Unstructured{}
		current.SetGroupVersionKind(stored.GroupVersionKind())
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(stored), current); err != nil {
			t.Fatal(err)
		}
		if errs := validation.ValidateCustomResource(field.NewPath(""), current.UnstructuredContent(), validator); len(errs) > 0 {
			t.Errorf("OLM's upgrade check would refuse the new CRD: %v", errs.ToAggregate())
		}
	}

	// The manager writes status; the user edits other fields: both go through.
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(stored.GroupVersionKind())
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(stored), obj); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(obj.Object, int64(7), "status", "missedSchedules"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Status().Update(ctx, obj); err != nil {
		t.Errorf("status write of a stored object refused: %v", err)
	}
	if err := k8s.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":true}}`))); err != nil {
		t.Errorf("edit of another field of a stored object refused: %v", err)
	}

	// Editing the offending field, or creating such an object, meets the new rules.
	for _, tt := range []struct {
		patch, message string
	}{
		{`{"spec":{"retention":{"keepDaily":0}}}`, "retention must keep at least one backup"},
		{`{"spec":{"s3Bucket":"other..bucket"}}`, "must not contain two adjacent dots"},
		{`{"spec":{"mover":{"activeDeadlineSeconds":999999999999}}}`, "activeDeadlineSeconds must be at most 604800"},
	} {
		err := k8s.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(tt.patch)))
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.message) {
			t.Errorf("patch %s: want Invalid saying %q, got %v", tt.patch, tt.message, err)
		}
	}
	fresh := storedBackup()
	fresh.SetName("created-after-the-upgrade")
	if err := k8s.Create(ctx, fresh); !apierrors.IsInvalid(err) {
		t.Errorf("a new object breaking the rules was admitted: %v", err)
	}
}

// storedBackup is a PVCBackup the released CRDs admitted and the new ones refuse.
func storedBackup() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "storage.okgoes.com/v1",
		"kind":       "PVCBackup",
		"metadata":   map[string]any{"name": "stored-before-the-upgrade", "namespace": "default"},
		"spec": map[string]any{
			"pvcName":   "data",
			"schedule":  "0 2 * * *",
			"s3Bucket":  "my..bucket",
			"retention": map[string]any{"keepLast": int64(0)},
			"s3": map[string]any{
				"endpoint":             "minio.backup.svc:9000",
				"credentialsSecretRef": map[string]any{"name": "s3-credentials"},
			},
		},
	}}
}

// applyStorageCRDs creates or updates the storage.okgoes.com CRDs of dir, as OLM applies a bundle's
// CRDs, and waits until they are served.
func applyStorageCRDs(t *testing.T, ctx context.Context, k8s client.Client, env *envtest.Environment, dir string) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	// PVCBackup and PVCRestore in every release; BackupCatalog from 0.5.0 on.
	paths, err := filepath.Glob(filepath.Join(dir, "storage.okgoes.com_*.yaml"))
	have := map[string]bool{}
	for _, p := range paths {
		have[filepath.Base(p)] = true
	}
	if err != nil || !have["storage.okgoes.com_pvcbackups.yaml"] || !have["storage.okgoes.com_pvcrestores.yaml"] {
		t.Fatalf("want the PVCBackup and PVCRestore CRDs in %s, found %v (%v)", dir, paths, err)
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		existing := &apiextensionsv1.CustomResourceDefinition{}
		switch err := k8s.Get(ctx, types.NamespacedName{Name: crd.Name}, existing); {
		case err == nil:
			crd.ResourceVersion = existing.ResourceVersion
			if err := k8s.Update(ctx, crd); err != nil {
				t.Fatalf("update CRD %s: %v", crd.Name, err)
			}
		case apierrors.IsNotFound(err):
			if err := k8s.Create(ctx, crd); err != nil {
				t.Fatalf("create CRD %s: %v", crd.Name, err)
			}
		default:
			t.Fatal(err)
		}
		crds = append(crds, crd)
	}
	if err := envtest.WaitForCRDs(env.Config, crds, envtest.CRDInstallOptions{MaxTime: 30 * time.Second, PollInterval: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	return crds
}
