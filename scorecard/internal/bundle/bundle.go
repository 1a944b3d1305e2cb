// Package bundle reads what the scorecard tests need from an unpacked OLM bundle (the directory
// scorecard mounts at /bundle in a test pod): the ClusterServiceVersion's owned CRDs, descriptors,
// permissions and alm-examples, and the CRDs themselves.
package bundle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Bundle is the part of a bundle the tests read.
type Bundle struct {
	Dir     string
	CSV     CSV
	CRDs    []*apiextensionsv1.CustomResourceDefinition
	Samples []*unstructured.Unstructured // alm-examples, in their order
}

// CSV is the subset of a ClusterServiceVersion the tests read. (operator-framework/api has the
// full type; this one keeps the test image free of its OLM dependencies.)
type CSV struct {
	Metadata struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		CustomResourceDefinitions struct {
			Owned []OwnedCRD `json:"owned"`
		} `json:"customresourcedefinitions"`
		Install struct {
			Spec struct {
				ClusterPermissions []Permission `json:"clusterPermissions"`
				Permissions        []Permission `json:"permissions"`
			} `json:"spec"`
		} `json:"install"`
	} `json:"spec"`
}

// OwnedCRD is one entry of spec.customresourcedefinitions.owned.
type OwnedCRD struct {
	Name              string       `json:"name"`
	Version           string       `json:"version"`
	Kind              string       `json:"kind"`
	Resources         []Resource   `json:"resources"`
	SpecDescriptors   []Descriptor `json:"specDescriptors"`
	StatusDescriptors []Descriptor `json:"statusDescriptors"`
}

// Resource is a kind an owned CRD's objects create.
type Resource struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Descriptor is a spec or status descriptor.
type Descriptor struct {
	Path         string   `json:"path"`
	DisplayName  string   `json:"displayName"`
	XDescriptors []string `json:"x-descriptors"`
}

// Permission is one service account's rules in the install strategy.
type Permission struct {
	ServiceAccountName string `json:"serviceAccountName"`
	Rules              []struct {
		APIGroups []string `json:"apiGroups"`
		Resources []string `json:"resources"`
		Verbs     []string `json:"verbs"`
	} `json:"rules"`
}

// Load reads the bundle in dir (manifests/ below it).
func Load(dir string) (*Bundle, error) {
	manifests := filepath.Join(dir, "manifests")
	entries, err := os.ReadDir(manifests)
	if err != nil {
		return nil, fmt.Errorf("read the bundle: %w", err)
	}
	b := &Bundle{Dir: dir}
	csvs := 0
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		path := filepath.Join(manifests, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		docs := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var raw json.RawMessage
			if err := docs.Decode(&raw); err == io.EOF {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			var tm struct{ Kind string }
			if err := json.Unmarshal(raw, &tm); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			switch tm.Kind {
			case "ClusterServiceVersion":
				csvs++
				if err := json.Unmarshal(raw, &b.CSV); err != nil {
					return nil, fmt.Errorf("%s: %w", path, err)
				}
			case "CustomResourceDefinition":
				crd := &apiextensionsv1.CustomResourceDefinition{}
				if err := json.Unmarshal(raw, crd); err != nil {
					return nil, fmt.Errorf("%s: %w", path, err)
				}
				b.CRDs = append(b.CRDs, crd)
			}
		}
	}
	if csvs != 1 {
		return nil, fmt.Errorf("%s holds %d ClusterServiceVersions, want 1", manifests, csvs)
	}
	sort.Slice(b.CRDs, func(i, j int) bool { return b.CRDs[i].Name < b.CRDs[j].Name })
	if b.Samples, err = parseExamples(b.CSV.Metadata.Annotations["alm-examples"]); err != nil {
		return nil, fmt.Errorf("alm-examples of %s: %w", b.CSV.Metadata.Name, err)
	}
	return b, nil
}

func parseExamples(s string) ([]*unstructured.Unstructured, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var items []map[string]any
	if err := yaml.Unmarshal([]byte(s), &items); err != nil {
		return nil, err
	}
	out := make([]*unstructured.Unstructured, 0, len(items))
	for i, item := range items {
		u := &unstructured.Unstructured{Object: item}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("example %d has no apiVersion or kind", i)
		}
		out = append(out, u)
	}
	return out, nil
}

// CRDFor is the bundle's CRD serving gvk's group and kind, or nil.
func (b *Bundle) CRDFor(gk schema.GroupKind) *apiextensionsv1.CustomResourceDefinition {
	for _, crd := range b.CRDs {
		if crd.Spec.Group == gk.Group && crd.Spec.Names.Kind == gk.Kind {
			return crd
		}
	}
	return nil
}

// Owned is the CSV's owned-CRD entry for a CRD name and version, or nil.
func (b *Bundle) Owned(crdName, version string) *OwnedCRD {
	for i := range b.CSV.Spec.CustomResourceDefinitions.Owned {
		o := &b.CSV.Spec.CustomResourceDefinitions.Owned[i]
		if o.Name == crdName && o.Version == version {
			return o
		}
	}
	return nil
}

// Schema is the openAPIV3Schema of a CRD version, or nil.
func Schema(crd *apiextensionsv1.CustomResourceDefinition, version string) *apiextensionsv1.JSONSchemaProps {
	for _, v := range crd.Spec.Versions {
		if v.Name == version {
			if v.Schema == nil {
				return nil
			}
			return v.Schema.OpenAPIV3Schema
		}
	}
	return nil
}

// Served tells whether the CRD serves version.
func Served(crd *apiextensionsv1.CustomResourceDefinition, version string) bool {
	for _, v := range crd.Spec.Versions {
		if v.Name == version {
			return v.Served
		}
	}
	return false
}

// Resource is the API resource of a sample, from the bundle's CRDs.
func (b *Bundle) Resource(u *unstructured.Unstructured) (schema.GroupVersionResource, error) {
	gvk := u.GroupVersionKind()
	crd := b.CRDFor(gvk.GroupKind())
	if crd == nil {
		return schema.GroupVersionResource{}, fmt.Errorf("no CRD in the bundle serves %s", gvk)
	}
	return gvk.GroupVersion().WithResource(crd.Spec.Names.Plural), nil
}

// SampleName is how the tests name a sample in their messages: Kind version/name.
func SampleName(u *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", u.GetKind(), u.GroupVersionKind().Version, u.GetName())
}
