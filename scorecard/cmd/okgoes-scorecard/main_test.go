package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	scapi "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
)

var bundleDir = filepath.Join("..", "..", "..", "bundle")

func runCLI(t *testing.T, args ...string) (int, scapi.TestStatus, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	var st scapi.TestStatus
	if stdout.Len() > 0 {
		dec := json.NewDecoder(&stdout)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&st); err != nil {
			t.Fatalf("stdout is not one TestStatus: %v\n%s", err, stdout.String())
		}
		if dec.More() {
			t.Fatalf("stdout holds more than one TestStatus")
		}
	}
	return code, st, stderr.String()
}

func TestStaticTestPrintsOneTestStatus(t *testing.T) {
	// Flags before and after the test name, as a scorecard entrypoint may give them.
	code, st, stderr := runCLI(t, "--bundle", bundleDir, "descriptors-cover-samples", "--timeout", "5s")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if len(st.Results) != 1 || st.Results[0].Name != "descriptors-cover-samples" || st.Results[0].State != scapi.PassState {
		t.Fatalf("%+v", st)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"--bundle", bundleDir, "no-such-test"}, {"--bundle", bundleDir}, {"samples-ready", "invalid-rejected"}} {
		code, st, _ := runCLI(t, args...)
		if code != 2 || len(st.Results) != 1 || st.Results[0].State != scapi.ErrorState ||
			!strings.Contains(st.Results[0].Errors[0], "valid tests: samples-ready, invalid-rejected") {
			t.Errorf("%v: exit %d, %+v", args, code, st)
		}
	}
}

// A test that cannot run reports the error state, and the exit code stays 0: the state is the
// outcome.
func TestErrorsAreResults(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("SCORECARD_NAMESPACE", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bundle", t.TempDir(), "alm-examples-have-spec"}, "read the bundle"},
		{[]string{"--bundle", bundleDir, "samples-ready"}, "no cluster to talk to"},
		{[]string{"--bundle", bundleDir, "--kubeconfig", filepath.Join(t.TempDir(), "missing"), "invalid-rejected"}, "no cluster to talk to"},
	} {
		code, st, _ := runCLI(t, c.args...)
		if code != 0 || len(st.Results) != 1 || st.Results[0].State != scapi.ErrorState || !strings.Contains(strings.Join(st.Results[0].Errors, " "), c.want) {
			t.Errorf("%v: exit %d, %+v", c.args, code, st)
		}
	}
}

func TestList(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"--list"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, name := range []string{"samples-ready", "invalid-rejected", "alm-examples-have-spec", "crds-have-validation",
		"crds-have-resources", "descriptors-cover-samples"} {
		if !strings.Contains(stdout.String(), name+"\t") {
			t.Errorf("--list does not show %s:\n%s", name, stdout.String())
		}
	}
}
