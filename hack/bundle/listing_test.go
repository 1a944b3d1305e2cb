package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"sigs.k8s.io/yaml"
)

// readCSV reads the ClusterServiceVersion of the bundle directory dir (bundle/ or releases/x.y.z).
func readCSV(t *testing.T, dir string) *operatorsv1alpha1.ClusterServiceVersion {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "manifests", packageName+".clusterserviceversion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	if err := yaml.Unmarshal(data, csv); err != nil {
		t.Fatal(err)
	}
	return csv
}

// TestListingDescribesTheOperator checks the OperatorHub listing of the release being developed
// against what the operator does (issue 33: the 0.4.0 listing still described the tar archive as
// the only backup format and named no prerequisite): the description names the default engine
// (kopia) and the archive engine, every kind the CSV owns, and a Prerequisites section with the
// bucket, the credentials Secret's keys (S3 keys and the repository password) and the
// VolumeSnapshotClass of snapshot backups; the display name is capitalised; every documentation
// link names a file of docs/ that exists.
func TestListingDescribesTheOperator(t *testing.T) {
	dir := filepath.Join(committed.root, "bundle")
	csv := readCSV(t, dir)
	for _, msg := range listingProblems(csv, committed.root, foreignKinds(t, dir)) {
		t.Error(msg)
	}
}

// foreignKinds are the kinds of the bundle's objects whose API neither Kubernetes nor OLM nor the
// bundle's own CRDs provide (the ServiceMonitor and PrometheusRule of the Prometheus Operator):
// OLM fails the install where the cluster does not serve them, so the Prerequisites name them.
func foreignKinds(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "manifests", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, f := range files {
		var obj struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, &obj); err != nil {
			t.Fatal(err)
		}
		group, _, ok := strings.Cut(obj.APIVersion, "/")
		if !ok || strings.HasSuffix(group, ".k8s.io") || strings.HasSuffix(group, "okgoes.com") ||
			group == "operators.coreos.com" || group == "apps" || group == "batch" || group == "policy" {
			continue
		}
		kinds = append(kinds, obj.Kind)
	}
	return kinds
}

// TestListingProblemsFindsAStaleListing proves the check above can fail: the 0.4.0 listing, which
// issue 33 found stale, and broken copies of the current one are each rejected for what they lack.
func TestListingProblemsFindsAStaleListing(t *testing.T) {
	old := readCSV(t, filepath.Join(committed.root, "releases", "0.4.0"))
	if got := listingProblems(old, committed.root, nil); len(got) == 0 {
		t.Error("the 0.4.0 listing passes, but it names neither kopia nor a prerequisite")
	} else {
		t.Logf("0.4.0: %s", strings.Join(got, "; "))
	}
	current := readCSV(t, filepath.Join(committed.root, "bundle"))
	// Each word taken out of the description must be reported.
	for removed, want := range map[string]string{
		"kopia": "kopia", "zstd": "archive", "BackupCatalog": "BackupCatalog",
		"## Prerequisites": "Prerequisites", "KOPIA_PASSWORD": "KOPIA_PASSWORD", "VolumeSnapshotClass": "VolumeSnapshotClass",
		"ServiceMonitor": "ServiceMonitor",
	} {
		c := current.DeepCopy()
		c.Spec.Description = strings.ReplaceAll(c.Spec.Description, removed, "x")
		if got := strings.Join(listingProblems(c, committed.root, []string{"ServiceMonitor"}), "; "); !strings.Contains(got, want) {
			t.Errorf("without %q: want a problem naming %q, got %q", removed, want, got)
		}
	}
	c := current.DeepCopy()
	c.Spec.DisplayName = "okgoes operator"
	c.Spec.Links[len(c.Spec.Links)-1].URL += "x"
	c.Spec.CustomResourceDefinitions.Owned[0].Kind = "Unheard"
	got := strings.Join(listingProblems(c, committed.root, nil), "; ")
	for _, want := range []string{"displayName", "no such file", "Unheard"} {
		if !strings.Contains(got, want) {
			t.Errorf("want a problem naming %q, got %q", want, got)
		}
	}
}

// prerequisites are what a user must have before the first backup, each with a word the
// Prerequisites section must say.
var prerequisites = []string{
	"bucket",                // S3-compatible storage to write to
	"AWS_ACCESS_KEY_ID",     // the credentials Secret's keys
	"AWS_SECRET_ACCESS_KEY", //
	"KOPIA_PASSWORD",        // the repository password of the default engine
	"VolumeSnapshotClass",   // snapshot backups
}

var docLink = regexp.MustCompile(`^https://github\.com/okgoes/okgoes-operator/(?:blob|tree)/main/(.+)$`)

// listingProblems returns what the listing of csv lacks, one sentence each; kinds are the kinds
// of objects the bundle installs whose API the cluster must already serve.
func listingProblems(csv *operatorsv1alpha1.ClusterServiceVersion, root string, kinds []string) []string {
	var problems []string
	d := csv.Spec.Description
	if !regexp.MustCompile(`(?i)kopia[^\n]*default|default[^\n]*kopia`).MatchString(d) {
		problems = append(problems, "the description does not name kopia as the default engine")
	}
	if !strings.Contains(d, "archive") || !strings.Contains(d, "zstd") {
		problems = append(problems, "the description does not name the archive engine (tar + zstd)")
	}
	for _, crd := range csv.Spec.CustomResourceDefinitions.Owned {
		if !strings.Contains(d, crd.Kind) {
			problems = append(problems, "the description does not name the owned kind "+crd.Kind)
		}
	}
	_, prereq, ok := strings.Cut(d, "## Prerequisites")
	if !ok {
		problems = append(problems, "the description has no Prerequisites section")
	}
	prereq, _, _ = strings.Cut(prereq, "\n## ")
	for _, p := range append(append([]string{}, prerequisites...), kinds...) {
		if ok && !strings.Contains(prereq, p) {
			problems = append(problems, "the Prerequisites section does not name "+p)
		}
	}
	for _, word := range strings.Fields(csv.Spec.DisplayName) {
		if r := []rune(word)[0]; !unicode.IsUpper(r) {
			problems = append(problems, "displayName "+csv.Spec.DisplayName+" is not capitalised")
			break
		}
	}
	for _, l := range csv.Spec.Links {
		m := docLink.FindStringSubmatch(l.URL)
		if m == nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			problems = append(problems, "link "+l.Name+" names no such file: "+m[1])
		}
	}
	return problems
}
