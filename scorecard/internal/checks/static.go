package checks

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/okgoes/okgoes-operator/scorecard/internal/bundle"
)

// The static tests read the bundle only. They check what the standard basic and OLM suites
// check, the way this operator needs it: against the samples, the schemas and the RBAC in the
// same bundle.

// examplesHaveSpec: every alm-example has a spec and is of a CRD the CSV owns, and every owned
// CRD has an example.
func examplesHaveSpec(_ context.Context, env *Env, r *recorder) {
	b := env.Bundle
	if len(b.Samples) == 0 {
		r.errorf("the CSV %s has no alm-examples", b.CSV.Metadata.Name)
		r.suggestf("add a sample per owned CRD to config/samples; the bundle generator copies them into alm-examples")
		return
	}
	withExample := map[string]bool{}
	for _, s := range b.Samples {
		name := bundle.SampleName(s)
		if s.GetName() == "" {
			r.errorf("%s: the example has no metadata.name", name)
		}
		spec, ok := s.Object["spec"].(map[string]any)
		switch {
		case !ok:
			r.errorf("%s: the example has no spec", name)
		case len(spec) == 0:
			r.errorf("%s: the example's spec is empty", name)
		default:
			r.logf("%s: spec sets %d fields", name, len(leafPaths(spec, "")))
		}
		crd := b.CRDFor(s.GroupVersionKind().GroupKind())
		if crd == nil {
			r.errorf("%s: no CRD in the bundle serves %s", name, s.GroupVersionKind().GroupKind())
			continue
		}
		if b.Owned(crd.Name, s.GroupVersionKind().Version) == nil {
			r.errorf("%s: the CSV does not own %s at version %s", name, crd.Name, s.GroupVersionKind().Version)
		}
		withExample[crd.Name] = true
	}
	for _, o := range b.CSV.Spec.CustomResourceDefinitions.Owned {
		if !withExample[o.Name] {
			r.errorf("owned CRD %s has no alm-example", o.Name)
		}
	}
}

// crdsHaveValidation: every owned CRD version has a structural schema with a spec, and the schema
// declares every field the examples of that version set (so nothing an example sets is pruned or
// left unvalidated).
func crdsHaveValidation(_ context.Context, env *Env, r *recorder) {
	b := env.Bundle
	for _, o := range b.CSV.Spec.CustomResourceDefinitions.Owned {
		id := o.Name + "/" + o.Version
		crd := crdNamed(b, o.Name)
		if crd == nil {
			r.errorf("%s: owned by the CSV but not in the bundle", id)
			continue
		}
		if !bundle.Served(crd, o.Version) {
			r.errorf("%s: the CRD does not serve version %s", id, o.Version)
			continue
		}
		root := bundle.Schema(crd, o.Version)
		if root == nil {
			r.errorf("%s: no openAPIV3Schema", id)
			continue
		}
		spec, ok := root.Properties["spec"]
		if !ok || len(spec.Properties) == 0 {
			r.errorf("%s: the openAPIV3Schema declares no spec fields", id)
			continue
		}
		n := countConstraints(&spec)
		if n == 0 {
			r.errorf("%s: the spec schema has no validation (no required, enum, bounds, pattern or CEL rule)", id)
		}
		r.logf("%s: %d validation constraints under spec", id, n)
		for _, s := range samplesOf(b, crd, o.Version) {
			spec, _ := s.Object["spec"].(map[string]any)
			for _, p := range leafPaths(spec, "") {
				if _, err := schemaAt(root, "spec."+p); err != nil {
					r.errorf("%s: example %s sets spec.%s, which the schema does not declare: %v", id, s.GetName(), p, err)
				}
			}
		}
	}
}

// crdsHaveResources: every owned CRD lists the kinds its objects create, and the operator's
// permissions in the CSV let it create each of them.
func crdsHaveResources(_ context.Context, env *Env, r *recorder) {
	b := env.Bundle
	perms := append(slices.Clone(b.CSV.Spec.Install.Spec.ClusterPermissions), b.CSV.Spec.Install.Spec.Permissions...)
	for _, o := range b.CSV.Spec.CustomResourceDefinitions.Owned {
		id := o.Name + "/" + o.Version
		if len(o.Resources) == 0 {
			r.errorf("%s: lists no resources", id)
			r.suggestf("list the kinds %s objects create under resources in the CSV", o.Kind)
			continue
		}
		var kinds []string
		for _, res := range o.Resources {
			kinds = append(kinds, res.Kind)
			if res.Kind == "" || res.Version == "" {
				r.errorf("%s: resource %+v needs kind and version", id, res)
				continue
			}
			if !mayCreate(perms, plural(res.Kind)) {
				r.errorf("%s: lists %s, but no permission in the CSV lets the operator create %s", id, res.Kind, plural(res.Kind))
			}
		}
		r.logf("%s: resources %s", id, strings.Join(kinds, ", "))
	}
}

// descriptorsCoverSamples: every field an example sets under spec (and status, if it has one) is
// described by a descriptor of its CRD version; every descriptor points at a field the schema
// declares; a status with conditions has the conditions descriptor.
func descriptorsCoverSamples(_ context.Context, env *Env, r *recorder) {
	b := env.Bundle
	for _, o := range b.CSV.Spec.CustomResourceDefinitions.Owned {
		id := o.Name + "/" + o.Version
		crd := crdNamed(b, o.Name)
		if crd == nil {
			r.errorf("%s: owned by the CSV but not in the bundle", id)
			continue
		}
		root := bundle.Schema(crd, o.Version)
		if root == nil {
			r.errorf("%s: no openAPIV3Schema", id)
			continue
		}
		for _, d := range o.SpecDescriptors {
			if _, err := schemaAt(root, "spec."+d.Path); err != nil {
				r.errorf("%s: specDescriptor %q points at no field of the schema: %v", id, d.Path, err)
			}
		}
		for _, d := range o.StatusDescriptors {
			if _, err := schemaAt(root, "status."+d.Path); err != nil {
				r.errorf("%s: statusDescriptor %q points at no field of the schema: %v", id, d.Path, err)
			}
		}
		if status, ok := root.Properties["status"]; ok {
			if _, ok := status.Properties["conditions"]; ok {
				i := slices.IndexFunc(o.StatusDescriptors, func(d bundle.Descriptor) bool { return d.Path == "conditions" })
				if i < 0 || !slices.Contains(o.StatusDescriptors[i].XDescriptors, "urn:alm:descriptor:io.kubernetes.conditions") {
					r.errorf("%s: status.conditions has no statusDescriptor with x-descriptor urn:alm:descriptor:io.kubernetes.conditions", id)
				}
			}
		}
		for _, s := range samplesOf(b, crd, o.Version) {
			for _, part := range []struct {
				field string
				descs []bundle.Descriptor
			}{{"spec", o.SpecDescriptors}, {"status", o.StatusDescriptors}} {
				obj, _ := s.Object[part.field].(map[string]any)
				if part.field == "spec" {
					// operator-sdk scorecard's olm-spec-descriptors wants a descriptor of its own
					// for every top-level key of an example's spec: one for a field below it is
					// not enough.
					for _, k := range slices.Sorted(maps.Keys(obj)) {
						if !slices.ContainsFunc(part.descs, func(d bundle.Descriptor) bool { return d.Path == k }) {
							r.errorf("%s: example %s sets spec.%s, which has no specDescriptor of its own", id, s.GetName(), k)
							r.suggestf("add a specDescriptor with path %s to the %s %s (+operator-sdk:csv:customresourcedefinitions marker)", k, o.Kind, o.Version)
						}
					}
				}
				covered := 0
				for _, p := range leafPaths(obj, "") {
					if !coveredBy(p, part.descs) {
						r.errorf("%s: example %s sets %s.%s, which no %sDescriptor describes", id, s.GetName(), part.field, p, part.field)
						r.suggestf("add a %sDescriptor for %s to the %s %s (+operator-sdk:csv:customresourcedefinitions marker)", part.field, p, o.Kind, o.Version)
						continue
					}
					covered++
				}
				if obj != nil {
					r.logf("%s: example %s: %d %s fields, all described", id, s.GetName(), covered, part.field)
				}
			}
		}
	}
}

// coveredBy: a descriptor describes its own path and everything below it.
func coveredBy(path string, descs []bundle.Descriptor) bool {
	for _, d := range descs {
		if d.Path == path || strings.HasPrefix(path, d.Path+".") || strings.HasPrefix(path, d.Path+"[") {
			return true
		}
	}
	return false
}

func crdNamed(b *bundle.Bundle, name string) *apiextensionsv1.CustomResourceDefinition {
	for _, crd := range b.CRDs {
		if crd.Name == name {
			return crd
		}
	}
	return nil
}

// samplesOf are the examples of a CRD at one version.
func samplesOf(b *bundle.Bundle, crd *apiextensionsv1.CustomResourceDefinition, version string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, s := range b.Samples {
		gvk := s.GroupVersionKind()
		if gvk.Group == crd.Spec.Group && gvk.Kind == crd.Spec.Names.Kind && gvk.Version == version {
			out = append(out, s)
		}
	}
	return out
}

// leafPaths are the dotted paths of the values set in obj: scalars, lists and empty objects.
func leafPaths(obj map[string]any, prefix string) []string {
	var out []string
	for _, k := range sortedKeys(obj) {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		if m, ok := obj[k].(map[string]any); ok && len(m) > 0 {
			out = append(out, leafPaths(m, p)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

// schemaAt is the schema of the field at a dotted path, following properties, for maps
// additionalProperties, and for a segment with an index (targets[0], as the CSV names the fields
// of a list's items) the list's items.
func schemaAt(root *apiextensionsv1.JSONSchemaProps, path string) (*apiextensionsv1.JSONSchemaProps, error) {
	cur := root
	for _, seg := range strings.Split(path, ".") {
		seg, index, indexed := strings.Cut(seg, "[")
		if p, ok := cur.Properties[seg]; ok {
			cur = &p
			if indexed {
				if cur.Items == nil || cur.Items.Schema == nil {
					return nil, fmt.Errorf("%q at %s is not a list ([%s)", seg, path, index)
				}
				cur = cur.Items.Schema
			}
			continue
		}
		if cur.AdditionalProperties != nil && cur.AdditionalProperties.Schema != nil {
			cur = cur.AdditionalProperties.Schema
			continue
		}
		return nil, fmt.Errorf("no field %q at %s", seg, path)
	}
	return cur, nil
}

// countConstraints counts the validations in a schema: required fields, enums, bounds, lengths,
// patterns, formats and CEL rules.
func countConstraints(s *apiextensionsv1.JSONSchemaProps) int {
	n := len(s.Required) + len(s.XValidations)
	if len(s.Enum) > 0 {
		n++
	}
	for _, set := range []bool{s.Minimum != nil, s.Maximum != nil, s.MinLength != nil, s.MaxLength != nil,
		s.MinItems != nil, s.MaxItems != nil, s.Pattern != "", s.Format != ""} {
		if set {
			n++
		}
	}
	for _, p := range s.Properties {
		n += countConstraints(&p)
	}
	if s.Items != nil && s.Items.Schema != nil {
		n += countConstraints(s.Items.Schema)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		n += countConstraints(s.AdditionalProperties.Schema)
	}
	return n
}

// plural is the API resource of a core or workload kind (Deployment -> deployments,
// PodDisruptionBudget -> poddisruptionbudgets, NetworkPolicy -> networkpolicies).
func plural(kind string) string {
	k := strings.ToLower(kind)
	switch {
	case strings.HasSuffix(k, "y") && !strings.HasSuffix(k, "ey"):
		return strings.TrimSuffix(k, "y") + "ies"
	case strings.HasSuffix(k, "s"):
		return k + "es"
	}
	return k + "s"
}

func mayCreate(perms []bundle.Permission, resource string) bool {
	for _, p := range perms {
		for _, rule := range p.Rules {
			if (slices.Contains(rule.Resources, resource) || slices.Contains(rule.Resources, "*")) &&
				(slices.Contains(rule.Verbs, "create") || slices.Contains(rule.Verbs, "*")) {
				return true
			}
		}
	}
	return false
}

// sortedCopy returns s sorted, for stable messages.
func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return out
}
