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

// readSamples reads config/samples/*.yaml; it returns them by kind/version (sampleKey) and as
// the alm-examples JSON.
func readSamples(dir string) (map[string]map[string]any, string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, "", err
	}
	sort.Strings(paths)
	byKind := map[string]map[string]any{}
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
		byKind[sampleKey(u.GetKind(), u.GroupVersionKind().Version)] = m
		list = append(list, m)
	}
	examples, err := json.MarshalIndent(list, "", "  ")
	return byKind, string(examples), err
}

// ownedCRDs describes each CRD for the console: display name, description, the objects it
// creates, and a descriptor for every field its sample sets plus the main status fields.
func sampleKey(kind, version string) string { return kind + "/" + version }

func ownedCRDs(crds []*apiextensionsv1.CustomResourceDefinition, samples map[string]map[string]any) []operatorsv1alpha1.CRDDescription {
	var out []operatorsv1alpha1.CRDDescription
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			kind := crd.Spec.Names.Kind
			d := operatorsv1alpha1.CRDDescription{
				Name: crd.Name, Version: v.Name, Kind: kind,
				DisplayName: displayNames[kind], Description: firstSentence(v.Schema.OpenAPIV3Schema.Description),
				Resources: resources[kind],
			}
			if spec, ok := samples[sampleKey(kind, v.Name)]["spec"].(map[string]any); ok {
				for _, p := range leafPaths("", spec) {
					d.SpecDescriptors = append(d.SpecDescriptors, operatorsv1alpha1.SpecDescriptor{Path: p, DisplayName: title(p)})
				}
			}
			for _, p := range statusFields[kind] {
				sd := operatorsv1alpha1.StatusDescriptor{Path: p, DisplayName: title(p)}
				if p == "conditions" {
					sd.XDescriptors = []string{"urn:alm:descriptor:io.kubernetes.conditions"}
				}
				d.StatusDescriptors = append(d.StatusDescriptors, sd)
			}
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

var displayNames = map[string]string{"RedisCache": "Redis Cache", "PVCBackup": "PVC Backup", "PVCRestore": "PVC Restore"}

var resources = map[string][]operatorsv1alpha1.APIResourceReference{
	"RedisCache": {{Kind: "Deployment", Name: "", Version: "v1"}, {Kind: "Service", Version: "v1"},
		{Kind: "ConfigMap", Version: "v1"}, {Kind: "PodDisruptionBudget", Version: "v1"}},
	"PVCBackup":  {{Kind: "Job", Version: "v1"}, {Kind: "PersistentVolumeClaim", Version: "v1"}, {Kind: "VolumeSnapshot", Version: "v1"}},
	"PVCRestore": {{Kind: "Job", Version: "v1"}, {Kind: "PersistentVolumeClaim", Version: "v1"}},
}

var statusFields = map[string][]string{
	"RedisCache": {"phase", "readyReplicas", "conditions"},
	"PVCBackup":  {"lastBackup", "nextBackup", "conditions"},
	"PVCRestore": {"phase", "backupID", "verifiedSHA256", "conditions"},
}

// leafPaths lists the dotted paths of the scalar and list fields of m.
func leafPaths(prefix string, m map[string]any) []string {
	var out []string
	for k, v := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
			out = append(out, leafPaths(p, sub)...)
			continue
		}
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func title(path string) string {
	last := path[strings.LastIndex(path, ".")+1:]
	var b strings.Builder
	for i, r := range last {
		if i == 0 {
			b.WriteString(strings.ToUpper(string(r)))
			continue
		}
		if r >= 'A' && r <= 'Z' {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i > 0 {
		return s[:i+1]
	}
	return strings.TrimSpace(s)
}
