// Package crdrules estimates the cost of a CRD's x-kubernetes-validations rules the way the API
// server does when the CRD is written: each rule is compiled with the API server's own CEL
// compiler and cost estimator, against the type the API server derives from the schema node the
// rule sits on, and its worst-case cost is multiplied by how often it can run in one object (the
// product of maxItems and maxProperties of the lists and maps above it).
//
// It is stricter than the API server in one way: a rule under a list or map without maxItems or
// maxProperties is an error here. The API server then multiplies by the number of items a whole
// request could hold, which passes for a cheap rule but leaves no room to add anything to it.
package crdrules

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// ErrUnbounded marks a rule that runs once per item of a list or map without maxItems or
// maxProperties: its cost has no bound the CRD states.
var ErrUnbounded = errors.New("runs once per item of a list or map without maxItems or maxProperties")

// ErrCompile marks a rule the API server would refuse to compile.
var ErrCompile = errors.New("does not compile")

// RuleCost is the cost the API server estimates for one x-kubernetes-validations rule.
type RuleCost struct {
	// Version is the CRD version whose schema holds the rule.
	Version string
	// Path is where the rule sits in that schema: ".spec.redis.image", "." for the root; "[*]"
	// stands for the items of a list and "{*}" for the values of a map.
	Path    string
	Rule    string
	Message string
	// Cost is the rule's worst-case cost times how often it can run in one object.
	Cost uint64
}

// Costs returns the estimated cost of every rule of every version of crd, in schema order
// (properties sorted by name). The error names each rule it could not estimate: one under an
// unbounded list or map (ErrUnbounded), or one that fails to compile (ErrCompile); those rules
// are left out of the costs.
func Costs(crd *apiextensionsv1.CustomResourceDefinition) ([]RuleCost, error) {
	var costs []RuleCost
	var errs []error
	for _, v := range crd.Spec.Versions {
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		s := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, s, nil); err != nil {
			return nil, fmt.Errorf("%s: %w", v.Name, err)
		}
		w := walk{version: v.Name}
		w.node("", s, validation.RootCELContext(s))
		costs = append(costs, w.costs...)
		errs = append(errs, w.errs...)
	}
	return costs, errors.Join(errs...)
}

// walk collects the costs and errors of the rules of one version's schema.
type walk struct {
	version string
	costs   []RuleCost
	errs    []error
}

// node estimates the rules of s and of everything below it. c is the API server's view of s:
// its CEL type and how often it occurs in one object.
func (w *walk) node(path string, s *apiextensions.JSONSchemaProps, c *validation.CELSchemaContext) {
	if len(s.XValidations) > 0 {
		w.rules(path, s, c)
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := s.Properties[n]
		w.node(path+"."+n, &p, c.ChildPropertyContext(&p, n))
	}
	if s.Items != nil && s.Items.Schema != nil {
		w.node(path+"[*]", s.Items.Schema, c.ChildItemsContext(s.Items.Schema))
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		w.node(path+"{*}", s.AdditionalProperties.Schema, c.ChildAdditionalPropertiesContext(s.AdditionalProperties.Schema))
	}
}

// rules compiles the rules of s as the API server does on a CRD create (no expressions exempt as
// already stored).
func (w *walk) rules(path string, s *apiextensions.JSONSchemaProps, c *validation.CELSchemaContext) {
	if path == "" {
		path = "." // the root
	}
	at := w.version + " " + path
	info, err := c.TypeInfo()
	if err == nil && info == nil {
		err = errors.New("no CEL type for this schema")
	}
	if err != nil {
		w.errs = append(w.errs, fmt.Errorf("%s: %w: %w", at, ErrCompile, err))
		return
	}
	results, err := cel.Compile(info.Schema, info.DeclType, celconfig.PerCallLimit,
		environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()), cel.NewExpressionsEnvLoader())
	if err != nil {
		w.errs = append(w.errs, fmt.Errorf("%s: %w: %w", at, ErrCompile, err))
		return
	}
	for i, r := range results {
		rule := s.XValidations[i]
		switch {
		case r.Error != nil:
			w.errs = append(w.errs, fmt.Errorf("%s: rule %q %w: %v", at, rule.Rule, ErrCompile, r.Error))
		case r.MessageExpressionError != nil:
			w.errs = append(w.errs, fmt.Errorf("%s: messageExpression of rule %q %w: %v", at, rule.Rule, ErrCompile, r.MessageExpressionError))
		case c.MaxCardinality == nil:
			w.errs = append(w.errs, fmt.Errorf("%s: rule %q %w", at, rule.Rule, ErrUnbounded))
		default:
			w.costs = append(w.costs, RuleCost{Version: w.version, Path: path, Rule: rule.Rule, Message: rule.Message,
				Cost: times(r.MaxCost, *c.MaxCardinality)})
		}
	}
}

// times is cost × cardinality, saturating at math.MaxUint64 as the API server's estimate does.
func times(cost, cardinality uint64) uint64 {
	if cost != 0 && cardinality > math.MaxUint64/cost {
		return math.MaxUint64
	}
	return cost * cardinality
}
