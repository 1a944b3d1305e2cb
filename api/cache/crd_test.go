// Package cache_test checks the generated RedisCache CRD the way the API server will judge it.
package cache_test

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/okgoes/okgoes-operator/api/cache/v1beta1"
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
