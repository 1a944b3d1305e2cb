package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// layOutSubmission runs hack/operatorhub-submission.sh as make operatorhub-submission does (without
// the operator-sdk CLI, whose validators checkOSDKBundleValidate runs) and returns
// operators/okgoes-operator/ of the layout.
func layOutSubmission(t *testing.T, version string, env ...string) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(committed.root, "hack", "operatorhub-submission.sh"), version, out)
	cmd.Env = append(append(os.Environ(), "OPERATORHUB_SDK_VALIDATE=false"), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("operatorhub-submission.sh %s: %v\n%s", version, err, b)
	}
	return filepath.Join(out, "operators", packageName)
}

func loadForTest(t *testing.T, dir string) *hubOperator {
	t.Helper()
	op, err := loadHubOperator(dir)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

// TestOperatorHubSubmission is the first OperatorHub submission (issue 33): the layout
// hack/operatorhub-submission.sh makes of the release being developed, which is the first version
// submitted, passes every community static check of operator-pipelines (operatorhub_checks_test.go)
// without a failure or a warning: it replaces nothing, its com.redhat.openshift.versions fits its
// minKubeVersion, ci.yaml is valid with its fbc block, and release-config.yaml names a template
// of that block.
func TestOperatorHubSubmission(t *testing.T) {
	pkg := layOutSubmission(t, committed.version)
	op := loadForTest(t, pkg)
	if len(op.bundles) != 1 {
		t.Fatalf("want the one bundle %s, have %d", committed.version, len(op.bundles))
	}
	if r, ok := lookup(op.bundles[0].csv, "spec.replaces").(string); ok {
		t.Errorf("the first submitted version replaces %s, which the community repositories lack", r)
	}
	if !op.fbcEnabled() {
		t.Error("ci.yaml does not enable FBC")
	}
	for _, r := range runStaticChecks(op) {
		if !r.fail && unavoidableWarnings[r.msg] {
			t.Logf("expected: %s", r)
			continue
		}
		t.Error(r)
	}
}

// unavoidableWarnings are warnings upstream's checks give every bundle: operator-sdk warns that
// the "operatorhub" validator, which check_osdk_bundle_validate_operatorhub selects, is deprecated.
var unavoidableWarnings = map[string]bool{
	`Warning: Value : The "operatorhub" validator is deprecated; for equivalent validation use "operatorhub/v2", "standardcapabilities" and "standardcategories" validators`: true,
}

// TestOperatorHubChecksCatchWhatIssue33Found proves the ported checks fail what issue 33 found
// wrong with a first submission, and the other faults each check exists for.
func TestOperatorHubChecksCatchWhatIssue33Found(t *testing.T) {
	ciYAML := filepath.Join(committed.root, "config", "operatorhub", "ci.yaml")
	// releaseAlone lays out a frozen release as the only bundle, as the old script did.
	releaseAlone := func(version string) *hubOperator {
		pkg := filepath.Join(t.TempDir(), packageName)
		if err := os.MkdirAll(filepath.Join(pkg, version), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{"manifests", "metadata"} {
			if b, err := exec.Command("cp", "-r", filepath.Join(committed.root, "releases", version, d), filepath.Join(pkg, version)).CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, b)
			}
		}
		data, err := os.ReadFile(ciYAML)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, "ci.yaml"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		return loadForTest(t, pkg)
	}
	current := func() *hubOperator { return loadForTest(t, layOutSubmission(t, committed.version)) }
	cases := []struct {
		name  string
		op    func() *hubOperator
		check string // the check that must report it
		fail  bool   // Fail, else Warn
	}{
		{"0.4.0 alone replaces the absent 0.3.0", func() *hubOperator { return releaseAlone("0.4.0") }, "check_replaces_availability", true},
		{"0.3.0 has minKubeVersion without com.redhat.openshift.versions", func() *hubOperator { return releaseAlone("0.3.0") }, "check_api_version_constraints", true},
		{"the first version keeps its replaces", func() *hubOperator {
			return loadForTest(t, layOutSubmission(t, committed.version, "OPERATORHUB_FIRST_VERSION=0.4.0"))
		}, "check_replaces_availability", true},
		{"an OpenShift release older than minKubeVersion", func() *hubOperator {
			op := current()
			op.bundles[0].annotations["com.redhat.openshift.versions"] = "v4.16"
			return op
		}, "check_api_version_constraints", true},
		{"ci.yaml without the fbc block", func() *hubOperator {
			op := current()
			delete(op.config, "fbc")
			op.bundles[0].releaseConfig = nil
			return op
		}, "check_using_fbc", false},
		{"release-config.yaml without ci.yaml's fbc block", func() *hubOperator {
			op := current()
			delete(op.config, "fbc")
			return op
		}, "check_bundle_release_config", true},
		{"a catalog mapping without catalog_names", func() *hubOperator {
			op := current()
			m := lookup(op.config, "fbc.catalog_mapping").([]any)[0].(map[string]any)
			delete(m, "catalog_names")
			return op
		}, "check_schema_operator_ci_config", true},
		{"an unknown key in the fbc block", func() *hubOperator {
			op := current()
			op.config["fbc"].(map[string]any)["catalogs"] = true
			return op
		}, "check_schema_operator_ci_config", true},
		{"one catalog in two templates", func() *hubOperator {
			op := current()
			m := op.config["fbc"].(map[string]any)
			first := m["catalog_mapping"].([]any)[0].(map[string]any)
			m["catalog_mapping"] = append(m["catalog_mapping"].([]any), map[string]any{
				"template_name": "other.yaml", "type": "olm.template.basic", "catalog_names": first["catalog_names"]})
			return op
		}, "check_catalog_usage_ci_config", true},
		{"release-config.yaml names a template ci.yaml does not map", func() *hubOperator {
			op := current()
			op.bundles[0].releaseConfig["catalog_templates"].([]any)[0].(map[string]any)["template_name"] = "semver.yaml"
			return op
		}, "check_bundle_release_config", true},
		{"release-config.yaml without channels", func() *hubOperator {
			op := current()
			delete(op.bundles[0].releaseConfig["catalog_templates"].([]any)[0].(map[string]any), "channels")
			return op
		}, "check_validate_schema_bundle_release_config", true},
		{"a display name under 3 characters", func() *hubOperator {
			op := current()
			op.bundles[0].csv["spec"].(map[string]any)["displayName"] = "ok"
			return op
		}, "check_required_fields", true},
		{"two bundles replacing each other", func() *hubOperator {
			op := current()
			next := cloneBundle(t, op.bundles[0], "0.5.1")
			next.csv["spec"].(map[string]any)["replaces"] = packageName + ".v0.5.0"
			op.bundles[0].csv["spec"].(map[string]any)["replaces"] = packageName + ".v0.5.1"
			op.bundles = append(op.bundles, next)
			return op
		}, "check_upgrade_graph_loop", true},
		{"a bundle neither replaced nor the head", func() *hubOperator {
			op := current()
			next := cloneBundle(t, op.bundles[0], "0.5.1")
			delete(next.csv["metadata"].(map[string]any)["annotations"].(map[string]any), "olm.skipRange")
			op.bundles = append(op.bundles, next)
			return op
		}, "check_dangling_bundles", true},
		{"a directory that is not the CSV's version", func() *hubOperator {
			op := current()
			op.bundles[0].dirVersion = "v" + committed.version
			return op
		}, "check_operator_version_directory_name", true},
	}
	for _, tc := range cases {
		var got []string
		found := false
		for _, r := range runStaticChecks(tc.op()) {
			got = append(got, r.String())
			if r.check == tc.check && r.fail == tc.fail {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: want %s to report it (fail=%v), got %q", tc.name, tc.check, tc.fail, got)
		} else {
			t.Logf("%s: %s", tc.name, strings.Join(got, "; "))
		}
	}
}

// cloneBundle copies b as another version of it (CSV name and directory).
func cloneBundle(t *testing.T, b *hubBundle, version string) *hubBundle {
	t.Helper()
	data, err := json.Marshal(b.csv)
	if err != nil {
		t.Fatal(err)
	}
	c := &hubBundle{dir: b.dir, dirVersion: version, annotations: b.annotations}
	if err := json.Unmarshal(data, &c.csv); err != nil {
		t.Fatal(err)
	}
	c.csv["metadata"].(map[string]any)["name"] = packageName + ".v" + version
	c.csv["spec"].(map[string]any)["version"] = version
	return c
}
