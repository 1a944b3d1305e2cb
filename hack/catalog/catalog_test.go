package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/model"
	"github.com/operator-framework/operator-registry/alpha/property"
	"github.com/operator-framework/operator-registry/pkg/cache"
	"github.com/operator-framework/operator-registry/pkg/lib/config"
	"github.com/sirupsen/logrus"
	"sigs.k8s.io/yaml"
)

const root = "../.."

var (
	catalogDir = filepath.Join(root, "catalog")
	opmBin     = filepath.Join(root, "bin", "opm")
)

func init() { logrus.SetLevel(logrus.WarnLevel) }

// makeVar reads a `NAME ?= value` default from the Makefile, so that the test renders what
// `make catalog` renders.
func makeVar(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*\?=\s*(\S+)\s*$`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("Makefile: no %s ?= ...", name)
	}
	return string(m[1])
}

// makeOptions are the options `make catalog` passes (CATALOG_BUNDLE_IMAGES=false: images off,
// and no digests).
func makeOptions(t *testing.T, images bool) options {
	o := options{
		releases:        filepath.Join(root, "releases"),
		bundleImageBase: makeVar(t, "IMAGE_TAG_BASE") + "-bundle",
		bundleImages:    images,
		channel:         makeVar(t, "DEFAULT_CHANNEL"),
	}
	if images {
		o.digests = committedDigests(t)
	}
	return o
}

// committedDigests is releases/digests.yaml.
func committedDigests(t *testing.T) *digests {
	t.Helper()
	d, err := loadDigests(filepath.Join(root, "releases", "digests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func renderBytes(t *testing.T, o options) []byte {
	t.Helper()
	cfg, _, err := render(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	data, err := encode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// writeCatalog writes a catalog into a fresh directory laid out like catalog/.
func writeCatalog(t *testing.T, data []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "okgoes-operator"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "okgoes-operator", "catalog.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// loadModel loads a catalog directory as `opm validate` and `opm serve` do.
func loadModel(t *testing.T, dir string) (*declcfg.DeclarativeConfig, model.Model) {
	t.Helper()
	if err := config.Validate(context.Background(), os.DirFS(dir)); err != nil {
		t.Fatalf("%s: opm validate's validation: %v", dir, err)
	}
	cfg, err := declcfg.LoadFS(context.Background(), os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	m, err := declcfg.ConvertToModel(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg, m
}

// opmValidate runs bin/opm validate when hack/tools/opm/build.sh has built it.
func opmValidate(t *testing.T, dir string) error {
	t.Helper()
	if _, err := os.Stat(opmBin); err != nil {
		t.Logf("%s not built (hack/tools/opm/build.sh): skipping opm validate", opmBin)
		return nil
	}
	out, err := exec.Command(opmBin, "validate", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("opm validate %s: %v\n%s", dir, err, out)
	}
	return nil
}

func TestCommittedCatalogIsUpToDate(t *testing.T) {
	want := renderBytes(t, makeOptions(t, true))
	got, err := os.ReadFile(catalogFile(catalogDir, "okgoes-operator"))
	if err != nil {
		t.Fatalf("%v: run make catalog", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("catalog/okgoes-operator/catalog.yaml is out of date (run make catalog); first difference at line %d:\ncommitted: %.200s\nrendered:  %.200s", i+1, g, w)
			}
		}
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	a := renderBytes(t, makeOptions(t, true))
	b := renderBytes(t, makeOptions(t, true))
	if !bytes.Equal(a, b) {
		t.Fatal("two renders of the same releases differ")
	}
}

func TestCommittedCatalogValidates(t *testing.T) {
	loadModel(t, catalogDir)
	if err := opmValidate(t, catalogDir); err != nil {
		t.Fatal(err)
	}
}

// shipped is a release as the test reads it, independently of the renderer.
type shipped struct {
	version   semver.Version
	csvName   string
	replaces  string
	skipRange string
	csv       map[string]any
	manifests []map[string]any
}

func readShipped(t *testing.T, dir string) []shipped {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []shipped
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		s := shipped{version: semver.MustParse(e.Name())}
		files, err := filepath.Glob(filepath.Join(dir, e.Name(), "manifests", "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var obj map[string]any
			if err := yaml.Unmarshal(data, &obj); err != nil {
				t.Fatal(err)
			}
			s.manifests = append(s.manifests, obj)
			if obj["kind"] == "ClusterServiceVersion" {
				s.csv = obj
				md := obj["metadata"].(map[string]any)
				s.csvName = md["name"].(string)
				if a, ok := md["annotations"].(map[string]any); ok {
					s.skipRange, _ = a["olm.skipRange"].(string)
				}
				s.replaces, _ = obj["spec"].(map[string]any)["replaces"].(string)
			}
		}
		if s.csv == nil {
			t.Fatalf("%s: no CSV", e.Name())
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version.LT(out[j].version) })
	return out
}

func TestChannelGraph(t *testing.T) {
	_, m := loadModel(t, catalogDir)
	rels := readShipped(t, filepath.Join(root, "releases"))
	newest := rels[len(rels)-1]
	channel := makeVar(t, "DEFAULT_CHANNEL")
	pins := committedDigests(t).Releases

	pkg := m["okgoes-operator"]
	if len(m) != 1 || pkg == nil {
		t.Fatalf("want exactly package okgoes-operator, got %v", keys(m))
	}
	if pkg.DefaultChannel == nil || pkg.DefaultChannel.Name != channel || len(pkg.Channels) != 1 {
		t.Fatalf("want the one channel %q as default, got default %v of %v", channel, pkg.DefaultChannel, keys(pkg.Channels))
	}
	spec := newest.csv["spec"].(map[string]any)
	if pkg.Description != spec["description"] {
		t.Errorf("package description is not the newest CSV's")
	}
	icon := spec["icon"].([]any)[0].(map[string]any)
	if pkg.Icon == nil || base64.StdEncoding.EncodeToString(pkg.Icon.Data) != icon["base64data"] || pkg.Icon.MediaType != icon["mediatype"] {
		t.Errorf("package icon is not the newest CSV's spec.icon")
	}

	ch := pkg.Channels[channel]
	head, err := ch.Head()
	if err != nil {
		t.Fatal(err)
	}
	if head.Name != newest.csvName {
		t.Fatalf("channel head is %s, want the newest release %s", head.Name, newest.csvName)
	}
	if len(ch.Bundles) != len(rels) {
		t.Fatalf("channel has %d bundles, releases/ has %d", len(ch.Bundles), len(rels))
	}
	// From the head, replaces reaches every release, newest to oldest.
	b := head
	for i := len(rels) - 1; i >= 0; i-- {
		r := rels[i]
		if b == nil || b.Name != r.csvName {
			t.Fatalf("replaces chain from the head: want %s at position %d, got %v", r.csvName, len(rels)-i, b)
		}
		wantReplaces, wantSkipRange := chainOf(rels, i)
		if i == 0 && b.Replaces != "" {
			t.Errorf("%s: the first release replaces %q", b.Name, b.Replaces)
		}
		if b.Replaces != wantReplaces || b.SkipRange != wantSkipRange {
			t.Errorf("%s: replaces %q skipRange %q, the CSV says replaces %q skipRange %q", b.Name, b.Replaces, b.SkipRange, wantReplaces, wantSkipRange)
		}
		if i > 0 {
			if rng, err := semver.ParseRange(b.SkipRange); err != nil || !rng(rels[i-1].version) || rng(r.version) {
				t.Errorf("%s: skipRange %q must skip %s and not %s", b.Name, b.SkipRange, rels[i-1].version, r.version)
			}
		}
		checkBundle(t, b, r, pins[r.version.String()])
		b = ch.Bundles[b.Replaces]
	}
	if b != nil {
		t.Fatalf("the oldest release replaces %s, which is in the channel", b.Name)
	}
}

// checkBundle compares a bundle with the release it was rendered from and pinned by (no pins:
// a bundle without an image, the CSV's relatedImages as they are).
func checkBundle(t *testing.T, b *model.Bundle, r shipped, pins releaseImages) {
	t.Helper()
	image := pins.Bundle
	if b.Image != image {
		t.Errorf("%s: image %q, want %q", b.Name, b.Image, image)
	}
	if b.Version.String() != r.version.String() {
		t.Errorf("%s: olm.package version %s, want %s", b.Name, b.Version, r.version)
	}
	// olm.gvk: every version of every CRD the bundle ships.
	var want []string
	for _, obj := range r.manifests {
		if obj["kind"] != "CustomResourceDefinition" {
			continue
		}
		spec := obj["spec"].(map[string]any)
		for _, v := range spec["versions"].([]any) {
			want = append(want, fmt.Sprintf("%s/%s/%s", spec["group"], v.(map[string]any)["name"], spec["names"].(map[string]any)["kind"]))
		}
	}
	var got []string
	for _, g := range b.PropertiesP.GVKs {
		got = append(got, fmt.Sprintf("%s/%s/%s", g.Group, g.Version, g.Kind))
	}
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("%s: olm.gvk %v, want the CRDs' versions %v", b.Name, got, want)
	}
	if n := len(b.PropertiesP.CSVMetadatas); n != 1 {
		t.Errorf("%s: %d olm.csv.metadata properties, want 1", b.Name, n)
	} else if b.PropertiesP.CSVMetadatas[0].DisplayName != r.csv["spec"].(map[string]any)["displayName"] {
		t.Errorf("%s: olm.csv.metadata is not the CSV's", b.Name)
	}
	// olm.bundle.object: every manifest, as base64 JSON.
	if len(b.PropertiesP.BundleObjects) != len(r.manifests) || len(b.Objects) != len(r.manifests) {
		t.Errorf("%s: %d olm.bundle.object properties (%d objects), want one per manifest (%d)", b.Name, len(b.PropertiesP.BundleObjects), len(b.Objects), len(r.manifests))
	}
	var gotObjs, wantObjs []string
	for _, o := range b.PropertiesP.BundleObjects {
		var obj map[string]any
		if err := json.Unmarshal(o.Data, &obj); err != nil {
			t.Fatalf("%s: olm.bundle.object: %v", b.Name, err)
		}
		gotObjs = append(gotObjs, objectKey(obj))
	}
	for _, obj := range r.manifests {
		wantObjs = append(wantObjs, objectKey(obj))
	}
	sort.Strings(gotObjs)
	sort.Strings(wantObjs)
	if strings.Join(gotObjs, " ") != strings.Join(wantObjs, " ") {
		t.Errorf("%s: olm.bundle.object %v, want the manifests %v", b.Name, gotObjs, wantObjs)
	}
	if b.CsvJSON == "" {
		t.Errorf("%s: no CSV among the bundle objects", b.Name)
	}
	// relatedImages: the CSV's, plus the bundle image when there is one.
	imgs := map[string]bool{}
	for _, ri := range b.RelatedImages {
		imgs[ri.Image] = true
	}
	if image != "" && !imgs[image] {
		t.Errorf("%s: relatedImages lack the bundle image %s", b.Name, image)
	}
	if ris, ok := r.csv["spec"].(map[string]any)["relatedImages"].([]any); ok {
		for _, ri := range ris {
			img := ri.(map[string]any)["image"].(string)
			if pins.Manager != "" && img == repository(pins.Manager)+":v"+r.version.String() {
				if imgs[img] || !imgs[pins.Manager] {
					t.Errorf("%s: relatedImages name the manager as %v, want only its digest %s", b.Name, slices.Sorted(maps.Keys(imgs)), pins.Manager)
				}
				continue
			}
			if !imgs[img] {
				t.Errorf("%s: relatedImages lack the CSV's %s", b.Name, img)
			}
		}
	}
}

// chainOf is what the channel entry of rels[i] must say: its CSV's spec.replaces and
// olm.skipRange, or when the CSV of a later release has none, the previous release and
// ">=<first> <version>".
func chainOf(rels []shipped, i int) (replaces, skipRange string) {
	r := rels[i]
	replaces, skipRange = r.replaces, r.skipRange
	if i > 0 && replaces == "" {
		replaces = rels[i-1].csvName
	}
	if i > 0 && skipRange == "" {
		skipRange = fmt.Sprintf(">=%s <%s", rels[0].version, r.version)
	}
	return replaces, skipRange
}

func objectKey(obj map[string]any) string {
	return fmt.Sprintf("%s/%s", obj["kind"], obj["metadata"].(map[string]any)["name"])
}

// The variant for OLM without a registry: same graph and properties, no images; it validates,
// and every bundle carries its objects, from which OLM installs it.
func TestLocalCatalog(t *testing.T) {
	dir := writeCatalog(t, renderBytes(t, makeOptions(t, false)))
	local, m := loadModel(t, dir)
	committed, _ := loadModel(t, catalogDir)
	rels := readShipped(t, filepath.Join(root, "releases"))
	ch := m["okgoes-operator"].Channels[makeVar(t, "DEFAULT_CHANNEL")]
	for _, r := range rels {
		b := ch.Bundles[r.csvName]
		if b == nil {
			t.Fatalf("no bundle %s", r.csvName)
		}
		checkBundle(t, b, r, releaseImages{})
		for _, ri := range b.RelatedImages {
			if strings.Contains(ri.Image, "-bundle:") {
				t.Errorf("%s: relatedImages name a bundle image %s", b.Name, ri.Image)
			}
		}
	}
	if !equalJSON(t, local.Channels, committed.Channels) || !equalJSON(t, local.Packages, committed.Packages) {
		t.Error("the local catalog's package or channel differs from catalog/'s")
	}
	for i := range local.Bundles {
		if !equalJSON(t, local.Bundles[i].Properties, committed.Bundles[i].Properties) {
			t.Errorf("%s: properties differ from catalog/'s", local.Bundles[i].Name)
		}
	}
	if err := opmValidate(t, dir); err != nil {
		t.Fatal(err)
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ja, jb)
}

// The validation rejects broken catalogs, so a passing TestCommittedCatalogValidates means
// something.
func TestBrokenCatalogsAreRejected(t *testing.T) {
	data, err := os.ReadFile(catalogFile(catalogDir, "okgoes-operator"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		mutate func(cfg *declcfg.DeclarativeConfig)
		want   string
	}{
		{"channel entry without a bundle", func(cfg *declcfg.DeclarativeConfig) {
			es := cfg.Channels[0].Entries
			cfg.Channels[0].Entries = append(es, declcfg.ChannelEntry{Name: "okgoes-operator.v99.0.0", Replaces: es[len(es)-1].Name})
		}, "no olm.bundle blobs found"},
		{"duplicate package", func(cfg *declcfg.DeclarativeConfig) {
			cfg.Packages = append(cfg.Packages, cfg.Packages[0])
		}, "duplicate package"},
		{"bundle in no channel", func(cfg *declcfg.DeclarativeConfig) {
			cfg.Channels[0].Entries = cfg.Channels[0].Entries[1:]
		}, "not found in any channel entries"},
		{"two channel heads", func(cfg *declcfg.DeclarativeConfig) {
			es := cfg.Channels[0].Entries
			es[len(es)-1].Replaces, es[len(es)-1].SkipRange = "", ""
		}, "multiple channel heads"},
		{"replaces cycle", func(cfg *declcfg.DeclarativeConfig) {
			es := cfg.Channels[0].Entries
			es[0].Replaces = es[len(es)-1].Name
		}, "no channel head found"},
		{"default channel without bundles", func(cfg *declcfg.DeclarativeConfig) {
			cfg.Packages[0].DefaultChannel = "fast"
		}, "channel must contain at least one bundle"},
		{"bundle without image or objects", func(cfg *declcfg.DeclarativeConfig) {
			b := &cfg.Bundles[0]
			b.Image = ""
			var props []property.Property
			for _, p := range b.Properties {
				if p.Type != property.TypeBundleObject {
					props = append(props, p)
				}
			}
			b.Properties = props
		}, "bundle image must be set"},
	}
	if len(readShipped(t, filepath.Join(root, "releases"))) < 2 {
		cases = cases[:3] // the graph cases need two releases
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := declcfg.LoadReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			c.mutate(cfg)
			var buf bytes.Buffer
			if err := declcfg.WriteYAML(*cfg, &buf); err != nil {
				t.Fatal(err)
			}
			dir := writeCatalog(t, buf.Bytes())
			err = config.Validate(context.Background(), os.DirFS(dir))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("validation: got %v, want an error with %q", err, c.want)
			}
			if err := validate(buf.Bytes()); err == nil {
				t.Fatal("hack/catalog's own validation accepts it")
			}
			if _, serr := os.Stat(opmBin); serr == nil {
				if out, err := exec.Command(opmBin, "validate", dir).CombinedOutput(); err == nil {
					t.Fatalf("opm validate accepts it:\n%s", out)
				}
			}
		})
	}
}

// copyReleases copies releases/ (manifests and metadata) into a temporary directory.
func copyReleases(t *testing.T) (string, []shipped) {
	t.Helper()
	src := filepath.Join(root, "releases")
	dst := t.TempDir()
	rels := readShipped(t, src)
	for _, r := range rels {
		copyDir(t, filepath.Join(src, r.version.String()), filepath.Join(dst, r.version.String()))
	}
	return dst, rels
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// editCSV rewrites lines of a release's CSV: each pattern (multi-line regexp) to its replacement.
func editCSV(t *testing.T, dir string, v semver.Version, edits ...string) {
	t.Helper()
	file := filepath.Join(dir, v.String(), "manifests", "okgoes-operator.clusterserviceversion.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(edits); i += 2 {
		re := regexp.MustCompile(`(?m)` + edits[i])
		if !re.Match(data) {
			t.Fatalf("%s: no line matches %s", file, edits[i])
		}
		data = re.ReplaceAll(data, []byte(edits[i+1]))
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

const (
	replacesLine  = `^  replaces: .*$`
	skipRangeLine = `^    olm\.skipRange: .*$`
)

// The chain comes from the CSVs; a CSV that contradicts the release order is an error.
func TestChainFromCSVs(t *testing.T) {
	if len(readShipped(t, filepath.Join(root, "releases"))) < 2 {
		t.Skip("needs two releases")
	}
	type check func(t *testing.T, cfg *declcfg.DeclarativeConfig, notes []string, err error)
	wantErr := func(s string) check {
		return func(t *testing.T, _ *declcfg.DeclarativeConfig, _ []string, err error) {
			if err == nil || !strings.Contains(err.Error(), s) {
				t.Fatalf("got %v, want an error with %q", err, s)
			}
		}
	}
	cases := []struct {
		name  string
		edit  func(t *testing.T, dir string, rels []shipped)
		check check
	}{
		{"replaces a release that is not the previous one", func(t *testing.T, dir string, rels []shipped) {
			editCSV(t, dir, rels[len(rels)-1].version, replacesLine, "  replaces: okgoes-operator.v0.0.9")
		}, wantErr("but the release before it is")},
		{"skipRange leaves out the replaced release", func(t *testing.T, dir string, rels []shipped) {
			last := rels[len(rels)-1]
			editCSV(t, dir, last.version, skipRangeLine, fmt.Sprintf("    olm.skipRange: '<%s'", rels[len(rels)-2].version))
		}, wantErr("leaves out")},
		{"skipRange includes the release itself", func(t *testing.T, dir string, rels []shipped) {
			last := rels[len(rels)-1]
			editCSV(t, dir, last.version, skipRangeLine, fmt.Sprintf("    olm.skipRange: '>=%s <=%s'", rels[0].version, last.version))
		}, wantErr("which is not older than")},
		{"skipRange that does not parse", func(t *testing.T, dir string, rels []shipped) {
			editCSV(t, dir, rels[len(rels)-1].version, skipRangeLine, "    olm.skipRange: 'sometimes'")
		}, wantErr("olm.skipRange")},
		{"the first release replaces something", func(t *testing.T, dir string, rels []shipped) {
			editCSV(t, dir, rels[0].version, `^  version: `, "  replaces: okgoes-operator.v0.0.1\n  version: ")
		}, wantErr("the first release replaces")},
		{"a directory that is not a version", func(t *testing.T, dir string, rels []shipped) {
			if err := os.Mkdir(filepath.Join(dir, "next"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, wantErr("named after its version")},
		{"no replaces and no skipRange: derived", func(t *testing.T, dir string, rels []shipped) {
			editCSV(t, dir, rels[len(rels)-1].version, replacesLine+`\n`, "", skipRangeLine+`\n`, "")
		}, func(t *testing.T, cfg *declcfg.DeclarativeConfig, notes []string, err error) {
			if err != nil {
				t.Fatal(err)
			}
			fromCSVs, _, err := render(context.Background(), makeOptions(t, true))
			if err != nil {
				t.Fatal(err)
			}
			if !equalJSON(t, cfg.Channels, fromCSVs.Channels) {
				t.Fatalf("derived entries %+v differ from the CSVs' %+v", cfg.Channels[0].Entries, fromCSVs.Channels[0].Entries)
			}
			if len(notes) != 2 {
				t.Fatalf("want a note for each derived value, got %q", notes)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, rels := copyReleases(t)
			c.edit(t, dir, rels)
			o := makeOptions(t, true)
			o.releases = dir
			cfg, notes, err := render(context.Background(), o)
			c.check(t, cfg, notes, err)
		})
	}
}

// A new release is rendered in semver order (0.10.0 after 0.9.0, not after 0.1.0) and becomes
// the head of the channel.
func TestNewReleaseBecomesHead(t *testing.T) {
	dir, rels := copyReleases(t)
	last := rels[len(rels)-1]
	next := semver.Version{Major: last.version.Major, Minor: (last.version.Minor/10 + 1) * 10}
	nextName := "okgoes-operator.v" + next.String()
	copyDir(t, filepath.Join(dir, last.version.String()), filepath.Join(dir, next.String()))
	editCSV(t, dir, next,
		`^  name: `+regexp.QuoteMeta(last.csvName)+`$`, "  name: "+nextName,
		`^  version: .*$`, "  version: "+next.String(),
		replacesLine, "  replaces: "+last.csvName,
		skipRangeLine, fmt.Sprintf("    olm.skipRange: '>=%s <%s'", rels[0].version, next))
	o := makeOptions(t, true)
	o.releases = dir
	cfg, _, err := render(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	data, err := encode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, m := loadModel(t, writeCatalog(t, data))
	ch := m["okgoes-operator"].DefaultChannel
	head, err := ch.Head()
	if err != nil {
		t.Fatal(err)
	}
	if head.Name != nextName || head.Replaces != last.csvName || len(ch.Bundles) != len(rels)+1 {
		t.Fatalf("head %s replaces %s (%d bundles), want %s replacing %s", head.Name, head.Replaces, len(ch.Bundles), nextName, last.csvName)
	}
	es := cfg.Channels[0].Entries
	if es[len(es)-1].Name != nextName {
		t.Fatalf("entries are not in semver order: %+v", es)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// What `opm serve` answers OLM for both catalogs, from the same cache it serves: the head of the
// channel is the newest release, each release is the one that replaces the one before, and a
// bundle without an image carries its objects (OLM installs from them) while catalog/'s bundles
// name their images.
func TestServedAsOpmServeServes(t *testing.T) {
	rels := readShipped(t, filepath.Join(root, "releases"))
	channel := makeVar(t, "DEFAULT_CHANNEL")
	pins := committedDigests(t).Releases
	for _, images := range []bool{true, false} {
		t.Run(fmt.Sprintf("bundle-images=%v", images), func(t *testing.T) {
			ctx := context.Background()
			dir := writeCatalog(t, renderBytes(t, makeOptions(t, images)))
			store, err := cache.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			if err := cache.LoadOrRebuild(ctx, store, os.DirFS(dir)); err != nil {
				t.Fatal(err)
			}
			head, err := store.GetBundleForChannel(ctx, "okgoes-operator", channel)
			if err != nil {
				t.Fatal(err)
			}
			if head.CsvName != rels[len(rels)-1].csvName {
				t.Fatalf("served head %s, want %s", head.CsvName, rels[len(rels)-1].csvName)
			}
			for i, r := range rels {
				b, err := store.GetBundle(ctx, "okgoes-operator", channel, r.csvName)
				if err != nil {
					t.Fatal(err)
				}
				wantPath := ""
				if images {
					wantPath = pins[r.version.String()].Bundle
				}
				_, wantSkipRange := chainOf(rels, i)
				if b.BundlePath != wantPath || b.Version != r.version.String() || b.SkipRange != wantSkipRange {
					t.Errorf("%s: served bundlePath %q version %s skipRange %q, want %q %s %q", r.csvName, b.BundlePath, b.Version, b.SkipRange, wantPath, r.version, wantSkipRange)
				}
				if !images && (len(b.Object) != len(r.manifests) || b.CsvJson == "") {
					t.Errorf("%s: served %d objects (csvJson %d bytes), want the %d manifests", r.csvName, len(b.Object), len(b.CsvJson), len(r.manifests))
				}
				if i > 0 {
					next, err := store.GetBundleThatReplaces(ctx, rels[i-1].csvName, "okgoes-operator", channel)
					if err != nil || next.CsvName != r.csvName {
						t.Errorf("served replacement of %s: %v %v, want %s", rels[i-1].csvName, next, err, r.csvName)
					}
				}
			}
		})
	}
}

// A release's bundle image can be pinned (by digest, as published catalogs name bundles): the
// bundle's image and its relatedImages entry are that reference, what OLM then unpacks; the others
// keep <base>:v<version>; a pin for a version that is not released is refused.
func TestBundleImagePinned(t *testing.T) {
	rels := readShipped(t, filepath.Join(root, "releases"))
	o := makeOptions(t, true)
	o.digests = nil
	first := rels[0].version.String()
	pinned := "quay.io/okgoes/okgoes-operator-bundle@sha256:" + strings.Repeat("ab", 32)
	o.bundleImageRefs = map[string]string{first: pinned}
	cfg, _, err := render(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range cfg.Bundles {
		want := o.bundleImageBase + ":v" + strings.TrimPrefix(b.Name, "okgoes-operator.v")
		if b.Name == rels[0].csvName {
			want = pinned
		}
		if b.Image != want {
			t.Errorf("%s: image %q, want %q", b.Name, b.Image, want)
		}
		if !slices.ContainsFunc(b.RelatedImages, func(r declcfg.RelatedImage) bool { return r.Image == want }) {
			t.Errorf("%s: relatedImages %v lack the bundle image %s", b.Name, b.RelatedImages, want)
		}
	}
	o.bundleImageRefs = map[string]string{"9.9.9": pinned}
	if _, _, err := render(context.Background(), o); err == nil || !strings.Contains(err.Error(), "9.9.9") {
		t.Errorf("a pin for an unreleased version: err %v, want one naming 9.9.9", err)
	}
	o.bundleImageBase = ""
	o.bundleImageRefs = map[string]string{first: pinned}
	if _, _, err := render(context.Background(), o); err == nil || !strings.Contains(err.Error(), "no bundle image") {
		t.Errorf("no base and a release without a pin: err %v, want no bundle image", err)
	}
}

// The committed catalog names every image of the project by digest: each bundle's image and, in
// relatedImages, each manager image, both what releases/digests.yaml pins for that release, which
// lists every release. Only the Redis image the CRD defaults to keeps its tag: it is upstream's,
// which this project neither builds nor can resolve offline.
func TestCommittedCatalogPinsByDigest(t *testing.T) {
	cfg, _ := loadModelCfg(t)
	d := committedDigests(t)
	rels := readShipped(t, filepath.Join(root, "releases"))
	if len(d.Releases) != len(rels) {
		t.Errorf("releases/digests.yaml lists %d releases, releases/ has %d (make release-digests)", len(d.Releases), len(rels))
	}
	for _, b := range cfg.Bundles {
		version := strings.TrimPrefix(b.Name, "okgoes-operator.v")
		pins, ok := d.Releases[version]
		if !ok {
			t.Errorf("%s: not in releases/digests.yaml (make release-digests)", b.Name)
			continue
		}
		if b.Image != pins.Bundle {
			t.Errorf("%s: image %s, want %s", b.Name, b.Image, pins.Bundle)
		}
		for _, ri := range b.RelatedImages {
			if !digestRef.MatchString(ri.Image) && ri.Image != "docker.io/library/redis:7.4-alpine" {
				t.Errorf("%s: relatedImages name %s by tag", b.Name, ri.Image)
			}
		}
		if !slices.ContainsFunc(b.RelatedImages, func(ri declcfg.RelatedImage) bool { return ri.Image == pins.Manager }) {
			t.Errorf("%s: relatedImages %v lack the manager %s", b.Name, b.RelatedImages, pins.Manager)
		}
	}
}

// The bundle digests releases/digests.yaml pins are what hack/images/build.sh builds from
// releases/ now (bundle.Dockerfile's files and labels, reproducible archives): a bundle image
// whose content or recipe changed fails here. (The manager digests are checked where the managers
// are built anyway: test/upgrade builds every release's manager with the release recipe and
// compares its image digest.)
func TestBundleDigestsAreTheBuilds(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "hack", "images", "build.sh"), "bundles")
	cmd.Env = append(os.Environ(), "IMAGES_OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/images/build.sh bundles: %v\n%s", err, b)
	}
	for v, pins := range committedDigests(t).Releases {
		ref, err := os.ReadFile(filepath.Join(out, "bundle-v"+v+".ref"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(ref)); got != pins.Bundle {
			t.Errorf("the bundle image of %s built from releases/%s is %s, releases/digests.yaml pins %s", v, v, got, pins.Bundle)
		}
	}
}

// loadModelCfg loads the committed catalog as declarative config.
func loadModelCfg(t *testing.T) (*declcfg.DeclarativeConfig, model.Model) {
	t.Helper()
	return loadModel(t, catalogDir)
}
