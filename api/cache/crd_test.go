// Package cache_test checks the generated RedisCache CRD the way the API server will judge it.
package cache_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"sigs.k8s.io/yaml"

	"github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	"github.com/okgoes/okgoes-operator/internal/crdrules"
)

// crdFile is the generated CRD, as envtest, kustomize and the OLM bundle use it.
var crdFile = filepath.Join("..", "..", "config", "crd", "bases", "cache.okgoes.com_rediscaches.yaml")

func loadCRD(t *testing.T) (*apiextensionsv1.CustomResourceDefinition, *apiextensions.CustomResourceDefinition) {
	t.Helper()
	raw, err := os.ReadFile(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	v1 := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(raw, v1); err != nil {
		t.Fatal(err)
	}
	internal := &apiextensions.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(v1, internal, nil); err != nil {
		t.Fatal(err)
	}
	return v1, internal
}

// TestImageRuleIsImageReferencePattern: the CEL rule on the image field of every served version
// is exactly v1beta1.ImageReferencePattern, the pattern the controller checks stored objects with.
func TestImageRuleIsImageReferencePattern(t *testing.T) {
	crd, _ := loadCRD(t)
	want := "self.matches('" + v1beta1.ImageReferencePattern + "')"
	for _, v := range crd.Spec.Versions {
		spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
		image, ok := spec.Properties["image"] // v1alpha1
		if redis, nested := spec.Properties["redis"]; nested {
			image, ok = redis.Properties["image"] // v1beta1
		}
		if !ok {
			t.Fatalf("%s: no image field", v.Name)
		}
		if len(image.XValidations) != 1 || image.XValidations[0].Rule != want {
			t.Errorf("%s: image rules %+v, want the one rule %s", v.Name, image.XValidations, want)
		}
	}
}

// TestCELRulesAreCheap: the API server accepts the CRD, and estimates every rule at under 1% of
// its per-rule limit. A rule reading a string without maxLength or a list or map without
// maxItems/maxProperties is estimated at the size of a whole request and would fail this long
// before it fails at the API server; a rule under such a list or map fails outright.
func TestCELRulesAreCheap(t *testing.T) {
	v1, crd := loadCRD(t)
	for _, v := range crd.Spec.Versions {
		if v.Storage { // as the API server records it on create
			crd.Status.StoredVersions = []string{v.Name}
		}
	}
	if errs := validation.ValidateCustomResourceDefinition(context.Background(), crd); len(errs) > 0 {
		t.Fatalf("the API server would reject the CRD: %v", errs.ToAggregate())
	}
	costs, err := crdrules.Costs(v1)
	if err != nil {
		t.Error(err)
	}
	for _, v := range crd.Spec.Versions {
		var total uint64
		for _, r := range costs {
			if r.Version != v.Name {
				continue
			}
			total += r.Cost
			t.Logf("%s %s: %d: %s", r.Version, r.Path, r.Cost, r.Rule)
			if r.Cost > validation.StaticEstimatedCostLimit/100 {
				t.Errorf("%s %s: rule %q is estimated at %d, over 1%% of the per-rule limit %d: bound the strings, lists and maps it reads",
					r.Version, r.Path, r.Rule, r.Cost, validation.StaticEstimatedCostLimit)
			}
		}
		t.Logf("%s: total estimated cost %d (limit %d)", v.Name, total, validation.StaticEstimatedCRDCostLimit)
	}
}
