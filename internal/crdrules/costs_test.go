package crdrules_test

import (
	"errors"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"

	"github.com/okgoes/okgoes-operator/internal/crdrules"
)

// nameRule reads the whole string: its cost grows with the string's maxLength.
const nameRule = "self.matches('^[a-z]+$')"

func str(maxLength *int64, rules ...string) apiextensionsv1.JSONSchemaProps {
	s := apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: maxLength}
	for _, r := range rules {
		s.XValidations = append(s.XValidations, apiextensionsv1.ValidationRule{Rule: r, Message: "m: " + r})
	}
	return s
}

func list(maxItems *int64, items apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "array", MaxItems: maxItems,
		Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &items}}
}

func dict(maxProperties *int64, values apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "object", MaxProperties: maxProperties,
		AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &values}}
}

// crdWith is a CRD whose one version v1 has spec with the given fields.
func crdWith(spec map[string]apiextensionsv1.JSONSchemaProps) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{
		Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"spec": {Type: "object", Properties: spec},
				},
			}},
		}},
	}}
}

// costOf is the cost of the one rule Costs finds in crd, failing the test on any error.
func costOf(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) crdrules.RuleCost {
	t.Helper()
	costs, err := crdrules.Costs(crd)
	if err != nil {
		t.Fatal(err)
	}
	if len(costs) != 1 {
		t.Fatalf("want one rule, got %+v", costs)
	}
	return costs[0]
}

// A rule reading a string without maxLength is estimated at the size of a whole request: far
// over the bounds the api tests hold rules to. The same rule on a short string is cheap.
func TestCostsGrowWithTheStringsARuleReads(t *testing.T) {
	bounded := costOf(t, crdWith(map[string]apiextensionsv1.JSONSchemaProps{"name": str(ptr.To[int64](63), nameRule)}))
	unbounded := costOf(t, crdWith(map[string]apiextensionsv1.JSONSchemaProps{"name": str(nil, nameRule)}))
	if want := (crdrules.RuleCost{Version: "v1", Path: ".spec.name", Rule: nameRule, Message: "m: " + nameRule, Cost: bounded.Cost}); bounded != want {
		t.Errorf("got %+v, want %+v", bounded, want)
	}
	if bounded.Cost == 0 || bounded.Cost > 1_000 {
		t.Errorf("rule on a string of at most 63 characters costs %d, want a small non-zero cost", bounded.Cost)
	}
	if unbounded.Cost < 100_000 {
		t.Errorf("rule on a string without maxLength costs %d, want it estimated at a whole request (over 100000)", unbounded.Cost)
	}
}

// A rule under a list or map runs once per item: its cost is multiplied by maxItems or
// maxProperties, and is an error when the list or map has none.
func TestCostsMultiplyByTheItemsAbove(t *testing.T) {
	one := costOf(t, crdWith(map[string]apiextensionsv1.JSONSchemaProps{"name": str(ptr.To[int64](63), nameRule)})).Cost
	item := str(ptr.To[int64](63), nameRule)

	tests := []struct {
		name     string
		field    apiextensionsv1.JSONSchemaProps
		wantPath string
		wantCost uint64 // 0: want ErrUnbounded
	}{
		{"list with maxItems", list(ptr.To[int64](10), item), ".spec.f[*]", 10 * one},
		{"map with maxProperties", dict(ptr.To[int64](5), item), ".spec.f{*}", 5 * one},
		{"list of lists", list(ptr.To[int64](3), list(ptr.To[int64](4), item)), ".spec.f[*][*]", 12 * one},
		{"list without maxItems", list(nil, item), "", 0},
		{"map without maxProperties", dict(nil, item), "", 0},
		{"bounded list inside an unbounded one", list(nil, list(ptr.To[int64](4), item)), "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			costs, err := crdrules.Costs(crdWith(map[string]apiextensionsv1.JSONSchemaProps{"f": tc.field}))
			if tc.wantCost == 0 {
				if !errors.Is(err, crdrules.ErrUnbounded) || !strings.Contains(err.Error(), nameRule) {
					t.Errorf("want ErrUnbounded naming the rule, got %v", err)
				}
				if len(costs) != 0 {
					t.Errorf("an unbounded rule has no cost, got %+v", costs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(costs) != 1 || costs[0].Path != tc.wantPath || costs[0].Cost != tc.wantCost {
				t.Errorf("got %+v, want one rule at %s costing %d", costs, tc.wantPath, tc.wantCost)
			}
		})
	}
}

// A rule the API server would not compile is an error naming it; the other rules are still
// estimated, on every version, the root's too.
func TestCostsReportRulesThatDoNotCompile(t *testing.T) {
	crd := crdWith(map[string]apiextensionsv1.JSONSchemaProps{
		"bad":  str(ptr.To[int64](63), "self + 1 > 0"),
		"good": str(ptr.To[int64](63), nameRule),
	})
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	root.XValidations = apiextensionsv1.ValidationRules{{Rule: "has(self.spec)"}}
	v2 := *crd.Spec.Versions[0].DeepCopy()
	v2.Name, v2.Storage = "v2", false
	crd.Spec.Versions = append(crd.Spec.Versions, v2)

	costs, err := crdrules.Costs(crd)
	if !errors.Is(err, crdrules.ErrCompile) || !strings.Contains(err.Error(), "self + 1 > 0") {
		t.Errorf("want ErrCompile naming the rule, got %v", err)
	}
	var got []string
	for _, c := range costs {
		got = append(got, c.Version+" "+c.Path)
	}
	if want := "v1 . v1 .spec.good v2 . v2 .spec.good"; strings.Join(got, " ") != want {
		t.Errorf("rules estimated: %q, want %q", strings.Join(got, " "), want)
	}
}
