package checks

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	scapi "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	"sigs.k8s.io/yaml"
)

// The bundle's scorecard configuration (written by hack/bundle) and this binary agree: every
// `suite: okgoes` entry runs a test the binary has, under its own name, from the scorecard image;
// and once the suite is configured, every test of the binary is in it.
func TestBundleScorecardConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "bundle", "tests", "scorecard", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	checkConfig(t, data)
}

// okgoesStage is the stage hack/bundle adds to bundle/tests/scorecard/config.yaml (image tag:
// the operator's version).
const okgoesStage = `- parallel: true
  tests:
  - entrypoint: [okgoes-scorecard, alm-examples-have-spec]
    image: quay.io/okgoes/okgoes-operator-scorecard:v0.3.0
    labels: {suite: okgoes, test: alm-examples-have-spec}
  - entrypoint: [okgoes-scorecard, crds-have-validation]
    image: quay.io/okgoes/okgoes-operator-scorecard:v0.3.0
    labels: {suite: okgoes, test: crds-have-validation}
  - entrypoint: [okgoes-scorecard, crds-have-resources]
    image: quay.io/okgoes/okgoes-operator-scorecard:v0.3.0
    labels: {suite: okgoes, test: crds-have-resources}
  - entrypoint: [okgoes-scorecard, descriptors-cover-samples]
    image: quay.io/okgoes/okgoes-operator-scorecard:v0.3.0
    labels: {suite: okgoes, test: descriptors-cover-samples}
  - entrypoint: [okgoes-scorecard, samples-ready]
    image: quay.io/okgoes/okgoes-operator-scorecard:v0.3.0
    labels: {suite: okgoes, test: samples-ready}
  - entrypoint: [okgoes-scorecard, invalid-rejected]
    image: quay.io/okgoes/okgoes-operator-scorecard:v0.3.0
    labels: {suite: okgoes, test: invalid-rejected}
`

func TestOkgoesStageIsComplete(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "bundle", "tests", "scorecard", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "suite: okgoes") {
		t.Skip("the bundle's config has the okgoes stage: TestBundleScorecardConfig checks it")
	}
	if !strings.HasSuffix(string(data), "\n") || !strings.Contains(string(data), "\nstages:\n") {
		t.Fatalf("unexpected layout of config.yaml:\n%s", data)
	}
	// The stages list is the last key of the file: the stage is appended to it.
	if got := checkConfig(t, append(data, okgoesStage...)); len(got) != len(Tests) {
		t.Fatalf("the stage configures %v", got)
	}
}

func checkConfig(t *testing.T, data []byte) (configured []string) {
	t.Helper()
	var cfg scapi.Configuration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("bundle/tests/scorecard/config.yaml: %v", err)
	}
	for _, stage := range cfg.Stages {
		for _, tc := range stage.Tests {
			if tc.Labels["suite"] != "okgoes" {
				continue
			}
			if len(tc.Entrypoint) != 2 || tc.Entrypoint[0] != "okgoes-scorecard" || Find(tc.Entrypoint[1]) == nil {
				t.Errorf("entry %v: want entrypoint [okgoes-scorecard, <one of %s>]", tc.Entrypoint, strings.Join(Names(), ", "))
				continue
			}
			if tc.Labels["test"] != tc.Entrypoint[1] {
				t.Errorf("entry %v: label test=%q, want %q", tc.Entrypoint, tc.Labels["test"], tc.Entrypoint[1])
			}
			if !strings.Contains(tc.Image, "/okgoes-operator-scorecard:") {
				t.Errorf("entry %v: image %q is not the scorecard image (make scorecard-image)", tc.Entrypoint, tc.Image)
			}
			configured = append(configured, tc.Entrypoint[1])
		}
	}
	if len(configured) == 0 {
		t.Log("bundle/tests/scorecard/config.yaml has no suite=okgoes stage yet (hack/bundle writes it)")
		return nil
	}
	for _, name := range Names() {
		if !slices.Contains(configured, name) {
			t.Errorf("test %s is not in bundle/tests/scorecard/config.yaml", name)
		}
	}
	return configured
}
