package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"sigs.k8s.io/yaml"
)

// upstreamImagesByTag are the images a CSV may name by tag, each with the reason.
var upstreamImagesByTag = map[string]string{
	defaultRedisImage: "the RedisCache CRD's default: upstream's image, whose digest no build here can compute",
}

// firstVersionByDigest is the first release whose CSV names the operator image by digest (the
// releases before it are never changed).
var firstVersionByDigest = semver.MustParse("0.5.0")

// csvImages are the images a CSV names, each with where: containerImage, the install strategy's
// containers, their RELATED_IMAGE_* variables, and relatedImages.
func csvImages(csv *operatorsv1alpha1.ClusterServiceVersion) map[string][]string {
	out := map[string][]string{}
	add := func(image, where string) { out[image] = append(out[image], where) }
	add(csv.Annotations["containerImage"], "containerImage")
	for _, d := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		pod := d.Spec.Template.Spec
		for _, c := range append(pod.InitContainers, pod.Containers...) {
			add(c.Image, "deployment "+d.Name+" container "+c.Name)
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "RELATED_IMAGE_") {
					add(e.Value, "deployment "+d.Name+" container "+c.Name+" "+e.Name)
				}
			}
		}
	}
	for _, r := range csv.Spec.RelatedImages {
		add(r.Image, "relatedImages "+r.Name)
	}
	return out
}

// imagesByTag returns the images of csv that are named by tag only, but those of
// upstreamImagesByTag, one sentence each.
func imagesByTag(csv *operatorsv1alpha1.ClusterServiceVersion) []string {
	var out []string
	for image, where := range csvImages(csv) {
		if !digestRef.MatchString(image) && upstreamImagesByTag[image] == "" {
			out = append(out, fmt.Sprintf("%s names %s by tag", strings.Join(where, ", "), image))
		}
	}
	sort.Strings(out)
	return out
}

// disconnectedProblems returns why csv may not claim features.operators.openshift.io/disconnected
// when it does: an image by tag (any, upstream's too: a mirror copies by digest), or an image the
// operator runs that no RELATED_IMAGE_* variable names (the operator would not know the mirror's
// copy): the RedisCache CRD's default image is run by the operator.
func disconnectedProblems(csv *operatorsv1alpha1.ClusterServiceVersion) []string {
	if csv.Annotations["features.operators.openshift.io/disconnected"] != "true" {
		return nil
	}
	var out []string
	related := map[string]bool{}
	for image, where := range csvImages(csv) {
		if !digestRef.MatchString(image) {
			out = append(out, fmt.Sprintf("claims disconnected, but %s names %s by tag", strings.Join(where, ", "), image))
		}
		for _, w := range where {
			if strings.Contains(w, "RELATED_IMAGE_") {
				related[image] = true
			}
		}
	}
	for image := range upstreamImagesByTag {
		if !related[image] {
			out = append(out, fmt.Sprintf("claims disconnected, but the operator runs %s, which no RELATED_IMAGE_* variable names", image))
		}
	}
	sort.Strings(out)
	return out
}

// TestBundleImagesByDigest: every release from 0.5.0 on names every image by digest (but
// upstream's Redis, upstreamImagesByTag), and so does bundle/ once releases/digests.yaml pins its
// version (make release: until the release commit exists, no digest of the operator image can be
// known, and bundle/ names it by tag; the test logs which). No CSV claims disconnected support
// unless it is true.
func TestBundleImagesByDigest(t *testing.T) {
	pinned, err := pinnedOperatorImage(committed)
	if err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob(filepath.Join(committed.root, "releases", "*"))
	dirs = append(dirs, filepath.Join(committed.root, "bundle"))
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "manifests")); err != nil {
			continue
		}
		csv := readCSV(t, dir)
		name := filepath.Base(dir) + " (" + csv.Spec.Version.String() + ")"
		byTag := imagesByTag(csv)
		mustPin := csv.Spec.Version.GTE(firstVersionByDigest) && (filepath.Base(dir) != "bundle" || pinned != committed.image)
		switch {
		case mustPin:
			for _, p := range byTag {
				t.Errorf("%s: %s", name, p)
			}
		case len(byTag) > 0:
			t.Logf("%s, not pinned yet: %s", name, strings.Join(byTag, "; "))
		}
		for _, p := range disconnectedProblems(csv) {
			t.Errorf("%s: %s", name, p)
		}
	}
}

// TestMakeBundlePinsTheOperatorImage generates the bundle as make release does, with the operator
// image of the version by digest, and wants it everywhere the operator image was named:
// containerImage, the manager container, RELATED_IMAGE_MOVER (the mover Jobs' image) and
// relatedImages; no image by tag is left (but upstream's Redis), and the scorecard image keeps its
// tag (it is not part of the operator).
func TestMakeBundlePinsTheOperatorImage(t *testing.T) {
	pin := imageRepository(committed.image) + "@sha256:" + strings.Repeat("ab", 32)
	o := committed
	o.digests, o.managerDigest = "", pin
	csv := generatedCSV(t, o)
	if p := imagesByTag(csv); len(p) > 0 {
		t.Errorf("pinned bundle: %s", strings.Join(p, "; "))
	}
	images := csvImages(csv)
	for _, where := range []string{"containerImage", "container manager", "RELATED_IMAGE_MOVER", "relatedImages okgoes-operator"} {
		found := false
		for _, w := range images[pin] {
			found = found || strings.Contains(w, where)
		}
		if !found {
			t.Errorf("%s does not name the pinned operator image (it is named at %v)", where, images[pin])
		}
	}

	// The same from releases/digests.yaml, and a pin of another repository is refused.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "digests.yaml"), []byte("releases:\n  "+o.version+":\n    manager: "+pin+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o.managerDigest, o.digests = "", filepath.Join(dir, "digests.yaml")
	if got := generatedCSV(t, o).Annotations["containerImage"]; got != pin {
		t.Errorf("with the pin in digests.yaml, containerImage is %s", got)
	}
	o.digests, o.managerDigest = "", "quay.io/someone/else@sha256:"+strings.Repeat("ab", 32)
	if _, err := generate(o); err == nil {
		t.Error("a pin of another repository was taken")
	}
}

// TestImageChecksFindTags proves the checks above can fail: 0.4.0 names the operator by tag, and
// a CSV that claims disconnected support while the operator runs upstream's Redis by tag, named by
// no RELATED_IMAGE_* variable, is caught.
func TestImageChecksFindTags(t *testing.T) {
	old := readCSV(t, filepath.Join(committed.root, "releases", "0.4.0"))
	if got := imagesByTag(old); len(got) == 0 {
		t.Error("0.4.0 names its operator image by tag, and imagesByTag finds nothing")
	}
	o := committed
	o.digests, o.managerDigest = "", imageRepository(committed.image)+"@sha256:"+strings.Repeat("cd", 32)
	csv := generatedCSV(t, o)
	csv.Annotations["features.operators.openshift.io/disconnected"] = "true"
	got := strings.Join(disconnectedProblems(csv), "; ")
	for _, want := range []string{"by tag", "no RELATED_IMAGE_"} {
		if !strings.Contains(got, want) {
			t.Errorf("disconnected claimed with Redis by tag: want a problem saying %q, got %q", want, got)
		}
	}
}

// generatedCSV runs the bundle generator with o and returns the CSV it writes.
func generatedCSV(t *testing.T, o options) *operatorsv1alpha1.ClusterServiceVersion {
	t.Helper()
	files, err := generate(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f.path, ".clusterserviceversion.yaml") {
			csv := &operatorsv1alpha1.ClusterServiceVersion{}
			if err := yaml.Unmarshal(f.data, csv); err != nil {
				t.Fatal(err)
			}
			return csv
		}
	}
	t.Fatal("no CSV generated")
	return nil
}
