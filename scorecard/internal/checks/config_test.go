package checks

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	scapi "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	"sigs.k8s.io/yaml"
)

// The bundle's scorecard configuration (written by hack/bundle) and this binary agree: the
// `suite: okgoes` entries run every test of the binary once, under its own name, from the
// scorecard image released with the operator image (same tag as the CSV's containerImage).
func TestBundleScorecardConfig(t *testing.T) {
	root := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, "bundle", "tests", "scorecard", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tag := operatorImageTag(t)
	for _, p := range configProblems(data, tag) {
		t.Error(p)
	}
}

// Each way the configuration can go wrong is reported, the okgoes stage missing altogether
// included.
func TestBundleScorecardConfigProblems(t *testing.T) {
	root := repoRoot(t)
	good, err := os.ReadFile(filepath.Join(root, "bundle", "tests", "scorecard", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tag := operatorImageTag(t)
	if p := configProblems(good, tag); len(p) > 0 {
		t.Fatalf("the bundle's configuration has problems: %v", p)
	}
	text := string(good)
	okgoesStage := text[strings.Index(text, "- parallel: true\n  tests:\n  - entrypoint: [okgoes-scorecard"):]
	for _, c := range []struct{ name, config, want string }{
		{"no okgoes stage", strings.TrimSuffix(text, okgoesStage), "has no suite=okgoes tests"},
		{"a test left out", strings.Replace(text, "  - entrypoint: [okgoes-scorecard, samples-ready]\n", "  - entrypoint: [okgoes-scorecard, invalid-rejected]\n", 1), "test samples-ready is not in"},
		{"a test twice", text + strings.Join(strings.Split(okgoesStage, "\n")[2:5], "\n") + "\n", "configured 2 times"},
		{"an unknown test", strings.Replace(text, "[okgoes-scorecard, samples-ready]", "[okgoes-scorecard, samples-rdy]", 1), "want entrypoint [okgoes-scorecard, <one of"},
		{"a wrong label", strings.Replace(text, "test: samples-ready}", "test: samples}", 1), `label test="samples"`},
		{"another image", strings.Replace(text, "/okgoes-operator-scorecard:", "/okgoes-operator:", 1), "is not the scorecard image"},
		{"another tag", strings.Replace(text, "-scorecard:"+tag, "-scorecard:v0.0.1", 1), "is not tagged " + tag},
		{"not a configuration", text + "extra: field\n", "config.yaml:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			problems := configProblems([]byte(c.config), tag)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) }) {
				t.Errorf("no problem says %q: %q", c.want, problems)
			}
		})
	}
}

// operatorImageTag is the tag of the bundle CSV's containerImage.
func operatorImageTag(t *testing.T) string {
	t.Helper()
	b := loadBundle(t)
	image := b.CSV.Metadata.Annotations["containerImage"]
	i := strings.LastIndex(image, ":")
	if i < 0 {
		t.Fatalf("containerImage %q has no tag", image)
	}
	return image[i+1:]
}

// configProblems lists what is wrong with a scorecard configuration's okgoes tests.
func configProblems(data []byte, tag string) (problems []string) {
	var cfg scapi.Configuration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return []string{"bundle/tests/scorecard/config.yaml: " + err.Error()}
	}
	count := map[string]int{}
	for _, stage := range cfg.Stages {
		for _, tc := range stage.Tests {
			if tc.Labels["suite"] != "okgoes" {
				continue
			}
			if len(tc.Entrypoint) != 2 || tc.Entrypoint[0] != "okgoes-scorecard" || Find(tc.Entrypoint[1]) == nil {
				problems = append(problems, fmt.Sprintf("entry %v: want entrypoint [okgoes-scorecard, <one of %s>]", tc.Entrypoint, strings.Join(Names(), ", ")))
				continue
			}
			name := tc.Entrypoint[1]
			if tc.Labels["test"] != name {
				problems = append(problems, fmt.Sprintf("entry %s: label test=%q, want %q", name, tc.Labels["test"], name))
			}
			if !strings.Contains(tc.Image, "/okgoes-operator-scorecard:") {
				problems = append(problems, fmt.Sprintf("entry %s: image %s is not the scorecard image (make scorecard-image)", name, tc.Image))
			} else if !strings.HasSuffix(tc.Image, ":"+tag) {
				problems = append(problems, fmt.Sprintf("entry %s: image %s is not tagged %s like the operator image", name, tc.Image, tag))
			}
			count[name]++
		}
	}
	if len(count) == 0 {
		return append(problems, "bundle/tests/scorecard/config.yaml has no suite=okgoes tests")
	}
	for _, name := range Names() {
		switch n := count[name]; {
		case n == 0:
			problems = append(problems, "test "+name+" is not in bundle/tests/scorecard/config.yaml")
		case n > 1:
			problems = append(problems, fmt.Sprintf("test %s is configured %d times", name, n))
		}
	}
	return problems
}
