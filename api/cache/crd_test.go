// Package cache_test checks the generated RedisCache CRD the way the API server will judge it.
package cache_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
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

// ruleCost is the cost the API server estimates for one x-kubernetes-validations rule: its
// worst-case cost times how often it can run in one object.
type ruleCost struct {
	path, rule string
	cost       uint64
}

// ruleCosts compiles every rule of s the way the API server does when the CRD is written.
func ruleCosts(t *testing.T, path string, s *apiextensions.JSONSchemaProps, c *validation.CELSchemaContext) []ruleCost {
	t.Helper()
	var out []ruleCost
	if len(s.XValidations) > 0 {
		info, err := c.TypeInfo()
		if err != nil || info == nil {
			t.Fatalf("%s: no CEL type: %v", path, err)
		}
		results, err := cel.Compile(info.Schema, info.DeclType, celconfig.PerCallLimit,
			environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()), cel.NewExpressionsEnvLoader())
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for i, r := range results {
			if r.Error != nil {
				t.Errorf("%s: rule %q: %v", path, s.XValidations[i].Rule, r.Error)
			}
			card := r.MaxCardinality
			if c.MaxCardinality != nil {
				card = *c.MaxCardinality
			}
			out = append(out, ruleCost{path, s.XValidations[i].Rule, r.MaxCost * card})
		}
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := s.Properties[n]
		out = append(out, ruleCosts(t, path+"."+n, &p, c.ChildPropertyContext(&p, n))...)
	}
	if s.Items != nil && s.Items.Schema != nil {
		out = append(out, ruleCosts(t, path+"[*]", s.Items.Schema, c.ChildItemsContext(s.Items.Schema))...)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		out = append(out, ruleCosts(t, path+"{*}", s.AdditionalProperties.Schema, c.ChildAdditionalPropertiesContext(s.AdditionalProperties.Schema))...)
	}
	return out
}

// TestCELRulesAreCheap: the API server accepts the CRD, and estimates every rule at under 1% of
// its per-rule limit. A rule reading a string without maxLength or a list or map without
// maxItems/maxProperties is estimated at the size of a whole request and would fail this long
// before it fails at the API server.
func TestCELRulesAreCheap(t *testing.T) {
	_, crd := loadCRD(t)
	for _, v := range crd.Spec.Versions {
		if v.Storage { // as the API server records it on create
			crd.Status.StoredVersions = []string{v.Name}
		}
	}
	if errs := validation.ValidateCustomResourceDefinition(context.Background(), crd); len(errs) > 0 {
		t.Fatalf("the API server would reject the CRD: %v", errs.ToAggregate())
	}
	for _, v := range crd.Spec.Versions {
		s := v.Schema.OpenAPIV3Schema
		var total uint64
		for _, r := range ruleCosts(t, v.Name, s, validation.RootCELContext(s)) {
			total += r.cost
			t.Logf("%s: %d: %s", r.path, r.cost, r.rule)
			if r.cost > validation.StaticEstimatedCostLimit/100 {
				t.Errorf("%s: rule %q is estimated at %d, over 1%% of the per-rule limit %d: bound the strings, lists and maps it reads",
					r.path, r.rule, r.cost, validation.StaticEstimatedCostLimit)
			}
		}
		t.Logf("%s: total estimated cost %d (limit %d)", v.Name, total, validation.StaticEstimatedCRDCostLimit)
	}
}
