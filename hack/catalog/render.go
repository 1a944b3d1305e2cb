package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing/fstest"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/operator-registry/alpha/action"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
	"github.com/operator-framework/operator-registry/pkg/image"
	"sigs.k8s.io/yaml"
)

const (
	skipRangeAnnotation = "olm.skipRange"
	channelsAnnotation  = "operators.operatorframework.io.bundle.channels.v1"
	defaultAnnotation   = "operators.operatorframework.io.bundle.channel.default.v1"
	packageAnnotation   = "operators.operatorframework.io.bundle.package.v1"
)

type options struct {
	// releases is the directory holding one bundle directory per released version.
	releases string
	// bundleImageBase is the repository of the bundle images; the image of version x.y.z is
	// <bundleImageBase>:vx.y.z.
	bundleImageBase string
	// bundleImageRefs pins the image of some releases (version x.y.z → reference, e.g. by
	// digest, as `opm render <image>@sha256:...` names it); it overrides bundleImageBase.
	bundleImageRefs map[string]string
	// bundleImages false writes bundles with an empty image: OLM then installs them from their
	// olm.bundle.object properties, with no registry (opm serve of this catalog is enough).
	bundleImages bool
	// channel is the one channel of the catalog; empty takes the default channel of the newest
	// release's metadata/annotations.yaml.
	channel string
	// digests pins the images of the releases it lists (releases/digests.yaml): the bundle image
	// (unless bundleImageRefs names one) and, in relatedImages, the manager image the CSV names
	// by tag. Nil: no pins.
	digests *digests
}

// release is one released bundle directory, with the fields of its CSV that shape the graph.
type release struct {
	dir       string
	version   semver.Version
	csv       v1alpha1.ClusterServiceVersion
	pkg       string
	channels  []string
	defChan   string
	replaces  string
	skipRange string
}

// loadReleases reads every releases/<version> directory, in semver order (oldest first).
func loadReleases(dir string) ([]release, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []release
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		v, err := semver.Parse(e.Name())
		if err != nil {
			return nil, fmt.Errorf("%s: a release directory is named after its version: %v", filepath.Join(dir, e.Name()), err)
		}
		r, err := loadRelease(filepath.Join(dir, e.Name()), v)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no release directories", dir)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version.LT(out[j].version) })
	return out, nil
}

func loadRelease(dir string, v semver.Version) (release, error) {
	r := release{dir: dir, version: v}
	manifests := filepath.Join(dir, "manifests")
	files, err := os.ReadDir(manifests)
	if err != nil {
		return r, err
	}
	found := 0
	for _, f := range files {
		if f.IsDir() || !(strings.HasSuffix(f.Name(), ".yaml") || strings.HasSuffix(f.Name(), ".yml")) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(manifests, f.Name()))
		if err != nil {
			return r, err
		}
		var tm struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(data, &tm); err != nil {
			return r, fmt.Errorf("%s: %v", filepath.Join(manifests, f.Name()), err)
		}
		if tm.Kind != "ClusterServiceVersion" {
			continue
		}
		found++
		if err := yaml.Unmarshal(data, &r.csv); err != nil {
			return r, fmt.Errorf("%s: %v", filepath.Join(manifests, f.Name()), err)
		}
	}
	if found != 1 {
		return r, fmt.Errorf("%s: want exactly one ClusterServiceVersion, found %d", manifests, found)
	}
	if got := r.csv.Spec.Version.Version; !got.EQ(v) {
		return r, fmt.Errorf("%s: the CSV's spec.version is %s, not the directory's version %s", dir, got, v)
	}
	r.replaces = r.csv.Spec.Replaces
	r.skipRange = r.csv.GetAnnotations()[skipRangeAnnotation]

	data, err := os.ReadFile(filepath.Join(dir, "metadata", "annotations.yaml"))
	if err != nil {
		return r, err
	}
	var meta struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return r, fmt.Errorf("%s/metadata/annotations.yaml: %v", dir, err)
	}
	r.pkg = meta.Annotations[packageAnnotation]
	r.defChan = meta.Annotations[defaultAnnotation]
	for _, c := range strings.Split(meta.Annotations[channelsAnnotation], ",") {
		if c = strings.TrimSpace(c); c != "" {
			r.channels = append(r.channels, c)
		}
	}
	if r.pkg == "" {
		return r, fmt.Errorf("%s/metadata/annotations.yaml: no %s", dir, packageAnnotation)
	}
	return r, nil
}

// chainEntries builds the channel entries: each release replaces the one before it, and skips
// the range its CSV names. A CSV's spec.replaces and olm.skipRange are taken as they are; a
// later release without them gets the previous release and ">=<first> <version>". Values that
// contradict the release order are an error, not something to paper over: the catalog would
// disagree with the bundle that was shipped.
func chainEntries(rels []release) ([]declcfg.ChannelEntry, []string, error) {
	var entries []declcfg.ChannelEntry
	var notes []string
	for i, r := range rels {
		e := declcfg.ChannelEntry{Name: r.csv.Name, Replaces: r.replaces, SkipRange: r.skipRange}
		e.Skips = append(e.Skips, r.csv.Spec.Skips...)
		if i == 0 {
			if e.Replaces != "" {
				return nil, nil, fmt.Errorf("%s: the first release replaces %q, which is not in releases/", r.dir, e.Replaces)
			}
		} else {
			prev := rels[i-1]
			if e.Replaces == "" {
				e.Replaces = prev.csv.Name
				notes = append(notes, fmt.Sprintf("%s: the CSV has no spec.replaces; the catalog uses %s", r.csv.Name, e.Replaces))
			} else if e.Replaces != prev.csv.Name {
				return nil, nil, fmt.Errorf("%s: the CSV replaces %q, but the release before it is %s (%s)", r.dir, e.Replaces, prev.csv.Name, prev.version)
			}
			if e.SkipRange == "" {
				e.SkipRange = fmt.Sprintf(">=%s <%s", rels[0].version, r.version)
				notes = append(notes, fmt.Sprintf("%s: the CSV has no %s; the catalog uses %q", r.csv.Name, skipRangeAnnotation, e.SkipRange))
			}
		}
		if e.SkipRange != "" {
			rng, err := semver.ParseRange(e.SkipRange)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %s %q: %v", r.dir, skipRangeAnnotation, e.SkipRange, err)
			}
			for j, o := range rels {
				switch {
				case j >= i && rng(o.version):
					return nil, nil, fmt.Errorf("%s: %s %q includes %s, which is not older than %s", r.dir, skipRangeAnnotation, e.SkipRange, o.version, r.version)
				case j == i-1 && !rng(o.version):
					return nil, nil, fmt.Errorf("%s: %s %q leaves out %s, the release it replaces", r.dir, skipRangeAnnotation, e.SkipRange, o.version)
				}
			}
		}
		entries = append(entries, e)
	}
	return entries, notes, nil
}

// render builds the file-based catalog of every release: one olm.package, one olm.channel and
// one olm.bundle per release, the bundles rendered by operator-registry's own render action
// (what `opm render <bundle-dir>` writes) plus the olm.csv.metadata property.
func render(ctx context.Context, o options) (*declcfg.DeclarativeConfig, []string, error) {
	rels, err := loadReleases(o.releases)
	if err != nil {
		return nil, nil, err
	}
	for version := range o.bundleImageRefs {
		if !slices.ContainsFunc(rels, func(r release) bool { return r.version.String() == version }) {
			return nil, nil, fmt.Errorf("bundle image of %s: no such release in %s", version, o.releases)
		}
	}
	if o.digests != nil {
		for version := range o.digests.Releases {
			if !slices.ContainsFunc(rels, func(r release) bool { return r.version.String() == version }) {
				return nil, nil, fmt.Errorf("digests of %s: no such release in %s", version, o.releases)
			}
		}
	}
	newest := rels[len(rels)-1]
	pkgName := newest.pkg
	channel := o.channel
	if channel == "" {
		channel = newest.defChan
	}
	if channel == "" {
		return nil, nil, fmt.Errorf("%s: no default channel in metadata/annotations.yaml", newest.dir)
	}
	for _, r := range rels {
		if r.pkg != pkgName {
			return nil, nil, fmt.Errorf("%s: package %q, but %s is package %q", r.dir, r.pkg, newest.dir, pkgName)
		}
		if !contains(r.channels, channel) {
			return nil, nil, fmt.Errorf("%s: the bundle's channels %v do not include %q", r.dir, r.channels, channel)
		}
	}
	entries, notes, err := chainEntries(rels)
	if err != nil {
		return nil, nil, err
	}

	pkg := declcfg.Package{
		Schema:         declcfg.SchemaPackage,
		Name:           pkgName,
		DefaultChannel: channel,
		Description:    newest.csv.Spec.Description,
	}
	if len(newest.csv.Spec.Icon) > 0 {
		icon := newest.csv.Spec.Icon[0]
		data, err := decodeBase64(icon.Data)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: spec.icon[0].base64data: %v", newest.dir, err)
		}
		pkg.Icon = &declcfg.Icon{Data: data, MediaType: icon.MediaType}
	}
	cfg := &declcfg.DeclarativeConfig{
		Packages: []declcfg.Package{pkg},
		Channels: []declcfg.Channel{{Schema: declcfg.SchemaChannel, Package: pkgName, Name: channel, Entries: entries}},
	}

	for _, r := range rels {
		b, err := renderBundle(ctx, r, o)
		if err != nil {
			return nil, nil, err
		}
		cfg.Bundles = append(cfg.Bundles, b)
	}
	return cfg, notes, nil
}

// renderBundle runs operator-registry's render action on one bundle directory.
func renderBundle(ctx context.Context, r release, o options) (declcfg.Bundle, error) {
	rd := action.Render{
		Refs:           []string{r.dir},
		AllowedRefMask: action.RefBundleDir,
		// Bundle directories need no registry; this one refuses, so nothing is ever pulled.
		Registry: noRegistry{},
	}
	pins, pinned := releaseImages{}, false
	if o.digests != nil {
		pins, pinned = o.digests.Releases[r.version.String()]
	}
	if o.bundleImages {
		img := o.bundleImageBase + ":v{{.Version}}"
		if ref, ok := o.bundleImageRefs[r.version.String()]; ok {
			img = ref
		} else if pinned {
			img = pins.Bundle
		} else if o.bundleImageBase == "" {
			return declcfg.Bundle{}, fmt.Errorf("release %s: no bundle image (--bundle-image-base or --bundle-image %s=REF)", r.version, r.version)
		}
		tmpl, err := templateParse(img)
		if err != nil {
			return declcfg.Bundle{}, err
		}
		rd.ImageRefTemplate = tmpl
	}
	cfg, err := rd.Run(ctx)
	if err != nil {
		return declcfg.Bundle{}, fmt.Errorf("render %s: %w", r.dir, err)
	}
	if len(cfg.Bundles) != 1 {
		return declcfg.Bundle{}, fmt.Errorf("render %s: want one bundle, got %d", r.dir, len(cfg.Bundles))
	}
	b := cfg.Bundles[0]
	if b.Name != r.csv.Name || b.Package != r.pkg {
		return declcfg.Bundle{}, fmt.Errorf("render %s: got bundle %s of package %s, want %s of %s", r.dir, b.Name, b.Package, r.csv.Name, r.pkg)
	}

	// olm.csv.metadata, as opm's bundle-object-to-csv-metadata migration writes it, before the
	// olm.bundle.object properties (which stay, so that a bundle without an image installs).
	var csv v1alpha1.ClusterServiceVersion
	if err := json.Unmarshal([]byte(b.CsvJSON), &csv); err != nil {
		return declcfg.Bundle{}, fmt.Errorf("render %s: CSV: %v", r.dir, err)
	}
	var others, objects []property.Property
	for _, p := range b.Properties {
		switch p.Type {
		case property.TypeCSVMetadata:
			return declcfg.Bundle{}, fmt.Errorf("render %s: unexpected %s property", r.dir, p.Type)
		case property.TypeBundleObject:
			objects = append(objects, p)
		default:
			others = append(others, p)
		}
	}
	b.Properties = append(append(others, property.MustBuildCSVMetadata(csv)), objects...)
	if pinned {
		// The manager image by digest: what a mirror copies (oc-mirror, opm's relatedImages).
		// Releases from 0.5.0 on name it by that digest already (make release pins it).
		tag := repository(pins.Manager) + ":v" + r.version.String()
		i := slices.IndexFunc(b.RelatedImages, func(ri declcfg.RelatedImage) bool { return ri.Image == tag || ri.Image == pins.Manager })
		if i < 0 {
			return declcfg.Bundle{}, fmt.Errorf("render %s: the manager pin %s: the CSV's relatedImages have no %s", r.dir, pins.Manager, tag)
		}
		b.RelatedImages[i].Image = pins.Manager
	}
	return b, nil
}

// encode writes the catalog as opm writes YAML.
func encode(cfg *declcfg.DeclarativeConfig) ([]byte, error) {
	var buf bytes.Buffer
	if err := declcfg.WriteYAML(*cfg, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// validate loads an encoded catalog as `opm validate` does (declcfg.LoadFS of the catalog
// directory, then declcfg.ConvertToModel, which validates the model) and validates the model.
func validate(data []byte) error {
	cfg, err := declcfg.LoadFS(context.Background(), fstest.MapFS{"catalog.yaml": {Data: data}})
	if err != nil {
		return err
	}
	m, err := declcfg.ConvertToModel(*cfg)
	if err != nil {
		return err
	}
	return m.Validate()
}

// catalogFile is where the catalog of package pkg lives under the catalog root.
func catalogFile(root, pkg string) string {
	return filepath.Join(root, pkg, "catalog.yaml")
}

type noRegistry struct{}

var errNoRegistry = errors.New("hack/catalog renders bundle directories only; no image is pulled")

func (noRegistry) Pull(context.Context, image.Reference) error           { return errNoRegistry }
func (noRegistry) Unpack(context.Context, image.Reference, string) error { return errNoRegistry }
func (noRegistry) Labels(context.Context, image.Reference) (map[string]string, error) {
	return nil, errNoRegistry
}
func (noRegistry) Destroy() error { return nil }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
