package v1_test

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"
)

// maxRuleCost is far below the API server's per-rule limit (celconfig.PerCallLimit, 1e6): a rule
// over a string or list without maxLength or maxItems is estimated at the size of a whole request
// and lands near the limit, so this catches a missing bound long before the API server refuses
// the CRD.
const maxRuleCost = 10_000

// Every CEL rule of the storage CRDs compiles and has a small worst-case cost, estimated the way
// the API server estimates it when the CRD is applied: a rule that scans a string or list without
// maxLength or maxItems, or runs under a list without maxItems, fails here. (A rule that only
// compares with constants, like the policies' `self in [...]`, is cheap without a bound, and gets
// none: exceeding a maxLength would stop the API server from running the CEL rules.)
func TestStorageCELRulesAreCostBounded(t *testing.T) {
	for _, name := range []string{"storage.okgoes.com_pvcbackups.yaml", "storage.okgoes.com_pvcrestores.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "crd", "bases", name))
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			t.Fatal(err)
		}
		for _, v := range crd.Spec.Versions {
			internal := &apiextensions.JSONSchemaProps{}
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
				t.Fatal(err)
			}
			s, err := schema.NewStructural(internal)
			if err != nil {
				t.Fatal(err)
			}
			rules := 0
			checkRules(t, crd.Spec.Names.Kind, s, "", true, 1, &rules)
			if rules == 0 {
				t.Errorf("%s: no CEL rule found: the walk is broken", crd.Spec.Names.Kind)
			}
		}
	}
}

// checkRules checks the rules of s and of everything below it. cardinality is how many times a
// rule at s can run per object: the product of the maxItems of the lists above it, 0 when one of
// them is unbounded.
func checkRules(t *testing.T, kind string, s *schema.Structural, path string, root bool, cardinality uint64, rules *int) {
	t.Helper()
	if len(s.XValidations) > 0 {
		results, err := cel.Compile(s, model.SchemaDeclType(s, root), celconfig.PerCallLimit,
			environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()), cel.NewExpressionsEnvLoader())
		if err != nil {
			t.Fatalf("%s %s: %v", kind, path, err)
		}
		for i, r := range results {
			*rules++
			rule := s.XValidations[i].Rule
			switch {
			case r.Error != nil:
				t.Errorf("%s %s: rule %q: %v", kind, path, rule, r.Error)
			case cardinality == 0:
				t.Errorf("%s %s: rule %q runs once per item of a list without maxItems", kind, path, rule)
			case r.MaxCost*cardinality > maxRuleCost:
				t.Errorf("%s %s: rule %q costs up to %d (x%d), over %d: bound the strings and lists it reads",
					kind, path, rule, r.MaxCost, cardinality, maxRuleCost)
			default:
				t.Logf("%s %s: cost %d: %s", kind, path, r.MaxCost*cardinality, s.XValidations[i].Message)
			}
		}
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := s.Properties[n]
		checkRules(t, kind, &p, path+"."+n, false, cardinality, rules)
	}
	if s.Items != nil {
		c := uint64(0)
		if s.ValueValidation != nil && s.ValueValidation.MaxItems != nil {
			c = cardinality * uint64(*s.ValueValidation.MaxItems)
		}
		checkRules(t, kind, s.Items, path+"[]", false, c, rules)
	}
}
