package main

import (
	"fmt"
	"go/ast"
	"math"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"golang.org/x/tools/go/packages"
	"sigs.k8s.io/controller-tools/pkg/loader"
	"sigs.k8s.io/controller-tools/pkg/markers"
)

// descriptorMarker is operator-sdk's CSV marker, in its syntax, so that the API types say how the
// console shows them and `operator-sdk generate kustomize manifests` would read the same:
//
//	on a kind:  +operator-sdk:csv:customresourcedefinitions:displayName="PVC Backup",resources={{Job,v1},{PersistentVolumeClaim,v1}}
//	on a field: +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Backup ID",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
//
// A field's descriptor gets the field's doc comment, on one line, as its description and its JSON
// path below spec or status as its path.
const descriptorMarker = "operator-sdk:csv:customresourcedefinitions"

// fieldMarker is the arguments of descriptorMarker on a field.
type fieldMarker struct {
	Type         string   `marker:",optional"`
	DisplayName  string   `marker:",optional"`
	XDescriptors []string `marker:",optional"`
	Order        *int     `marker:",optional"`
}

// kindMarker is the arguments of descriptorMarker on a kind's type.
type kindMarker struct {
	DisplayName string     `marker:",optional"`
	Resources   [][]string `marker:",optional"`
	Order       *int       `marker:",optional"`
}

// kindDescription is what the markers of one kind (one API version) say.
type kindDescription struct {
	displayName string
	resources   []operatorsv1alpha1.APIResourceReference
	spec        []operatorsv1alpha1.SpecDescriptor
	status      []operatorsv1alpha1.StatusDescriptor
}

// apiTypes holds the parsed types of the API packages under api/, by package directory
// (e.g. "cache/v1beta1") and type name.
type apiTypes map[string]map[string]*markers.TypeInfo

// loadAPITypes parses the Go packages under root/api (syntax only, no type checking).
func loadAPITypes(root string) (apiTypes, error) {
	reg := &markers.Registry{}
	for _, def := range []*markers.Definition{
		markers.Must(markers.MakeDefinition(descriptorMarker, markers.DescribesField, fieldMarker{})),
		markers.Must(markers.MakeDefinition(descriptorMarker, markers.DescribesType, kindMarker{})),
	} {
		if err := reg.Register(def); err != nil {
			return nil, err
		}
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	pkgs, err := loader.LoadRootsWithConfig(&packages.Config{Dir: abs}, "./api/...")
	if err != nil {
		return nil, fmt.Errorf("loading api/: %w", err)
	}
	col := &markers.Collector{Registry: reg}
	out := apiTypes{}
	for _, pkg := range pkgs {
		if len(pkg.GoFiles) == 0 {
			continue
		}
		rel, err := filepath.Rel(filepath.Join(abs, "api"), filepath.Dir(pkg.GoFiles[0]))
		if err != nil {
			return nil, err
		}
		types := map[string]*markers.TypeInfo{}
		err = markers.EachType(col, pkg, func(info *markers.TypeInfo) { types[info.Name] = info })
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pkg.PkgPath, err)
		}
		if len(pkg.Errors) > 0 {
			return nil, fmt.Errorf("%s: %v", pkg.PkgPath, pkg.Errors[0])
		}
		out[filepath.ToSlash(rel)] = types
	}
	return out, nil
}

// describe reads the markers of kind in the API package of group (its first DNS label names the
// directory under api/) and version.
func (a apiTypes) describe(group, version, kind string) (kindDescription, error) {
	dir := strings.SplitN(group, ".", 2)[0] + "/" + version
	types := a[dir]
	t := types[kind]
	if t == nil {
		return kindDescription{}, fmt.Errorf("api/%s has no type %s", dir, kind)
	}
	var d kindDescription
	for _, v := range t.Markers[descriptorMarker] {
		m, ok := v.(kindMarker)
		if !ok {
			continue
		}
		if m.DisplayName != "" {
			d.displayName = m.DisplayName
		}
		for _, r := range m.Resources {
			if len(r) < 2 || len(r) > 3 {
				return d, fmt.Errorf("%s %s: resource %q is not {kind,version[,name]}", kind, version, r)
			}
			ref := operatorsv1alpha1.APIResourceReference{Kind: r[0], Version: r[1]}
			if len(r) == 3 {
				ref.Name = r[2]
			}
			d.resources = append(d.resources, ref)
		}
	}
	if d.displayName == "" {
		return d, fmt.Errorf("api/%s: %s has no %s displayName marker", dir, kind, descriptorMarker)
	}
	w := walker{types: types, kind: kind + " " + version}
	for _, f := range t.Fields {
		seg, _, _ := jsonSegment(f)
		switch seg {
		case "spec":
			if err := w.walk(f, "spec", nil, 0); err != nil {
				return d, err
			}
		case "status":
			if err := w.walk(f, "status", nil, 0); err != nil {
				return d, err
			}
		}
	}
	for _, x := range sorted(w.found["spec"]) {
		d.spec = append(d.spec, operatorsv1alpha1.SpecDescriptor{Path: x.path, DisplayName: x.displayName, Description: x.description, XDescriptors: x.xDescriptors})
	}
	for _, x := range sorted(w.found["status"]) {
		d.status = append(d.status, operatorsv1alpha1.StatusDescriptor{Path: x.path, DisplayName: x.displayName, Description: x.description, XDescriptors: x.xDescriptors})
	}
	return d, nil
}

type descriptor struct {
	path, displayName, description string
	xDescriptors                   []string
	order                          int
}

// sorted orders descriptors as operator-sdk does: by order (unset last), then by path.
func sorted(ds []descriptor) []descriptor {
	sort.SliceStable(ds, func(i, j int) bool {
		if ds[i].order != ds[j].order {
			return ds[i].order < ds[j].order
		}
		return ds[i].path < ds[j].path
	})
	return ds
}

// walker follows the fields of spec or status through the struct types of the kind's package.
type walker struct {
	types map[string]*markers.TypeInfo
	kind  string
	found map[string][]descriptor // "spec"/"status" -> descriptors
}

// walk records the descriptor of field f (at path, below spec or status), then walks the fields
// of its type when that is a struct of the package. The spec and status fields themselves (path
// nil) have no descriptor.
func (w *walker) walk(f markers.FieldInfo, which string, path []string, depth int) error {
	if depth > 10 {
		return fmt.Errorf("%s: %s.%s nests too deep", w.kind, which, strings.Join(path, "."))
	}
	if w.found == nil {
		w.found = map[string][]descriptor{}
	}
	if len(path) > 0 {
		for _, v := range f.Markers[descriptorMarker] {
			m, ok := v.(fieldMarker)
			if !ok {
				continue
			}
			p := strings.Join(path, ".")
			if m.Type != "spec" && m.Type != "status" {
				return fmt.Errorf("%s: %s: type=%q, want spec or status", w.kind, p, m.Type)
			}
			if m.Type != which {
				return fmt.Errorf("%s: %s is under %s but its marker says type=%s", w.kind, p, which, m.Type)
			}
			if m.DisplayName == "" {
				return fmt.Errorf("%s: %s.%s: the descriptor marker has no displayName", w.kind, which, p)
			}
			d := descriptor{path: p, displayName: m.DisplayName, description: strings.Join(strings.Fields(f.Doc), " "), xDescriptors: m.XDescriptors, order: math.MaxInt}
			if m.Order != nil {
				d.order = *m.Order
			}
			w.found[which] = append(w.found[which], d)
		}
	}
	name, slice := localTypeName(f.RawField.Type)
	t := w.types[name]
	if t == nil || t.Fields == nil {
		return nil
	}
	if slice && len(path) > 0 {
		path = append(path[:len(path)-1:len(path)-1], path[len(path)-1]+"[0]")
	}
	for _, sub := range t.Fields {
		seg, inline, skip := jsonSegment(sub)
		if skip {
			continue
		}
		p := path
		if !inline {
			p = append(path[:len(path):len(path)], seg)
		}
		if err := w.walk(sub, which, p, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// jsonSegment is the JSON name of a field: inline for embedded and `json:",inline"` fields, skip
// for unexported and `json:"-"` ones.
func jsonSegment(f markers.FieldInfo) (seg string, inline, skip bool) {
	if len(f.RawField.Names) == 0 {
		return "", true, false
	}
	if !ast.IsExported(f.Name) {
		return "", false, true
	}
	tag, ok := reflect.StructTag(f.Tag).Lookup("json")
	if !ok {
		return f.Name, false, false
	}
	name, opts, _ := strings.Cut(tag, ",")
	switch {
	case name == "-" && opts == "":
		return "", false, true
	case strings.Contains(","+opts+",", ",inline,"):
		return "", true, false
	case name == "":
		return f.Name, false, false
	}
	return name, false, false
}

// localTypeName is the name of a field's type when it is declared in the same package (T, *T,
// []T, []*T), and whether it is a slice; "" for other types.
func localTypeName(e ast.Expr) (string, bool) {
	slice := false
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
			continue
		case *ast.ArrayType:
			slice = true
			e = t.Elt
			continue
		case *ast.Ident:
			return t.Name, slice
		}
		return "", false
	}
}
