// Package checks holds the okgoes custom scorecard tests. Each one reads the bundle and, where it
// needs a cluster, talks to the API server through a dynamic client; each returns one
// scorecard v1alpha3 TestResult whose state carries pass or fail.
package checks

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	scapi "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	"k8s.io/client-go/dynamic"

	"github.com/okgoes/okgoes-operator/scorecard/internal/bundle"
)

// Env is what a test runs with.
type Env struct {
	Bundle *bundle.Bundle
	// Client and Namespace are set for the tests that need a cluster.
	Client    dynamic.Interface
	Namespace string
	// Timeout bounds each wait of a cluster test (objects reconciled, objects gone).
	Timeout time.Duration
	// Poll is how often a wait looks again (default one second).
	Poll time.Duration
}

// Test is one scorecard test.
type Test struct {
	Name        string
	Description string
	// Cluster tells whether the test needs Env.Client and Env.Namespace.
	Cluster bool
	run     func(context.Context, *Env, *recorder)
}

// Tests are all the tests, in the order `--list` shows them.
var Tests = []Test{
	{Name: "samples-ready", Cluster: true, run: samplesReady,
		Description: "every alm-example is created in the scorecard namespace, reconciled by the operator, then deleted and gone"},
	{Name: "invalid-rejected", Cluster: true, run: invalidRejected,
		Description: "a copy of each alm-example breaking one OpenAPI or CEL rule of its CRD is rejected at admission with a clear message (server-side dry run)"},
	{Name: "alm-examples-have-spec", run: examplesHaveSpec,
		Description: "every alm-example is of an owned CRD and has a non-empty spec"},
	{Name: "crds-have-validation", run: crdsHaveValidation,
		Description: "every owned CRD version has an openAPIV3Schema that declares every field the alm-examples set"},
	{Name: "crds-have-resources", run: crdsHaveResources,
		Description: "every owned CRD lists the resources its objects create, and the operator may create them"},
	{Name: "descriptors-cover-samples", run: descriptorsCoverSamples,
		Description: "spec/status descriptors cover every field path in the alm-examples and point at fields that exist"},
}

// Find is the test called name, or nil.
func Find(name string) *Test {
	for i := range Tests {
		if Tests[i].Name == name {
			return &Tests[i]
		}
	}
	return nil
}

// Names are the names of all tests.
func Names() []string {
	names := make([]string, len(Tests))
	for i, t := range Tests {
		names[i] = t.Name
	}
	return names
}

// Run runs the test and returns its result.
func (t *Test) Run(ctx context.Context, env *Env) scapi.TestResult {
	r := &recorder{}
	if t.Cluster && (env.Client == nil || env.Namespace == "") {
		r.errorf("test %s needs a cluster and a namespace (SCORECARD_NAMESPACE or --namespace)", t.Name)
		return r.result(t.Name, scapi.ErrorState)
	}
	if env.Poll == 0 {
		env.Poll = time.Second
	}
	if env.Timeout == 0 {
		env.Timeout = 2 * time.Minute
	}
	t.run(ctx, env, r)
	if len(r.errors) > 0 {
		return r.result(t.Name, scapi.FailState)
	}
	return r.result(t.Name, scapi.PassState)
}

// recorder collects what a test found.
type recorder struct {
	log         []string
	errors      []string
	suggestions []string
}

func (r *recorder) logf(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf(format, args...))
}
func (r *recorder) errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) suggestf(format string, args ...any) {
	r.suggestions = append(r.suggestions, fmt.Sprintf(format, args...))
}

func (r *recorder) result(name string, state scapi.State) scapi.TestResult {
	return scapi.TestResult{
		Name:        name,
		State:       state,
		Log:         strings.Join(r.log, "\n"),
		Errors:      nonNil(r.errors),
		Suggestions: nonNil(r.suggestions),
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Status wraps results the way scorecard reads them from a test pod's log.
func Status(results ...scapi.TestResult) scapi.TestStatus {
	return scapi.TestStatus{Results: results}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
