package v1_test

import (
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/okgoes/okgoes-operator/internal/crdrules"
)

// maxRuleCost is far below the API server's per-rule limit (celconfig.PerCallLimit, 1e6): a rule
// over a string or list without maxLength or maxItems is estimated at the size of a whole request
// and lands near the limit, so this catches a missing bound long before the API server refuses
// the CRD.
const maxRuleCost = 10_000

// Every CEL rule of the storage CRDs compiles and has a small worst-case cost, estimated the way
// the API server estimates it when the CRD is applied (crdrules.Costs): a rule that scans a
// string or list without maxLength or maxItems, or runs under a list without maxItems, fails
// here. (A rule that only compares with constants, like the policies' `self in [...]`, is cheap
// without a bound, and gets none: exceeding a maxLength would stop the API server from running
// the CEL rules.)
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
		costs, err := crdrules.Costs(crd)
		if err != nil {
			t.Errorf("%s: %v", crd.Spec.Names.Kind, err)
		}
		for _, v := range crd.Spec.Versions {
			rules := 0
			for _, r := range costs {
				if r.Version != v.Name {
					continue
				}
				rules++
				if r.Cost > maxRuleCost {
					t.Errorf("%s %s: rule %q costs up to %d, over %d: bound the strings and lists it reads",
						crd.Spec.Names.Kind, r.Path, r.Rule, r.Cost, maxRuleCost)
				} else {
					t.Logf("%s %s: cost %d: %s", crd.Spec.Names.Kind, r.Path, r.Cost, r.Message)
				}
			}
			if rules == 0 {
				t.Errorf("%s %s: no CEL rule found: the walk is broken", crd.Spec.Names.Kind, v.Name)
			}
		}
	}
}
