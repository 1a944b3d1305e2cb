package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func parseVersion(v string) (semver.Version, error) { return semver.Parse(v) }

// readSamples reads config/samples/*.yaml; it returns them by kind/version (sampleKey; a kind
// may have several, e.g. one per RedisCache mode) and as the alm-examples JSON.
func readSamples(dir string) (map[string][]map[string]any, string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, "", err
	}
	sort.Strings(paths)
	byKind := map[string][]map[string]any{}
	var list []map[string]any
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, "", err
		}
		var m map[string]any
		if err := yaml.Unmarshal(data, &m); err != nil {
			return nil, "", fmt.Errorf("%s: %w", p, err)
		}
		u := &unstructured.Unstructured{Object: m}
		key := sampleKey(u.GetKind(), u.GroupVersionKind().Version)
		byKind[key] = append(byKind[key], m)
		list = append(list, m)
	}
	examples, err := json.MarshalIndent(list, "", "  ")
	return byKind, string(examples), err
}

func sampleKey(kind, version string) string { return kind + "/" + version }

// ownedCRDs describes each served CRD version for the console: the display name, the objects it
// creates and the spec and status descriptors, all from the descriptor markers of the API types
// (descriptors.go), and the first sentence of the schema's description. Every top-level spec key
// of a sample must have a descriptor of its own (what operator-sdk scorecard's
// olm-spec-descriptors test requires of alm-examples), and a sample with a status needs status
// descriptors (olm-status-descriptors).
func ownedCRDs(crds []*apiextensionsv1.CustomResourceDefinition, api apiTypes, samples map[string][]map[string]any) ([]operatorsv1alpha1.CRDDescription, error) {
	var out []operatorsv1alpha1.CRDDescription
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			kind := crd.Spec.Names.Kind
			m, err := api.describe(crd.Spec.Group, v.Name, kind)
			if err != nil {
				return nil, err
			}
			d := operatorsv1alpha1.CRDDescription{
				Name: crd.Name, Version: v.Name, Kind: kind,
				DisplayName: m.displayName, Description: firstSentence(v.Schema.OpenAPIV3Schema.Description),
				Resources: m.resources, SpecDescriptors: m.spec, StatusDescriptors: m.status,
			}
			for _, sample := range samples[sampleKey(kind, v.Name)] {
				if err := samplesDescribed(sample, d); err != nil {
					return nil, err
				}
			}
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// samplesDescribed fails when a top-level key of the sample's spec has no spec descriptor, or the
// sample has a status and the kind no status descriptor.
func samplesDescribed(sample map[string]any, d operatorsv1alpha1.CRDDescription) error {
	described := map[string]bool{}
	for _, sd := range d.SpecDescriptors {
		described[sd.Path] = true
	}
	spec, _ := sample["spec"].(map[string]any)
	var missing []string
	for k := range spec {
		if !described[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		return fmt.Errorf("%s %s: the sample sets spec.%s, which has no spec descriptor (add a %s:type=spec marker to the field)",
			d.Kind, d.Version, strings.Join(missing, ", spec."), descriptorMarker)
	}
	if status, _ := sample["status"].(map[string]any); len(status) > 0 && len(d.StatusDescriptors) == 0 {
		return fmt.Errorf("%s %s: the sample has a status and the kind no status descriptor", d.Kind, d.Version)
	}
	return nil
}

func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i > 0 {
		return s[:i+1]
	}
	return strings.TrimSpace(s)
}
