package checks

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/okgoes/okgoes-operator/scorecard/internal/bundle"
)

// mutation breaks one rule of a CRD schema in a copy of an example.
type mutation struct {
	what  string // e.g. "spec.replicas = -1 (minimum 0)"
	field string // the field path the API server must name; "" for a rule on the whole object
	want  string // what the API server's message must say
	apply func(*unstructured.Unstructured)
}

// leafRuleValues are values that break the CEL rules on a single field, by the rule's message.
var leafRuleValues = map[string]any{
	"maxMemory must be at least 1Mi": "512Ki",
	"must be a Redis maxmemory-policy: noeviction, allkeys-lru, allkeys-lfu, allkeys-random, volatile-lru, volatile-lfu, volatile-random or volatile-ttl": "lru",
	"must be Always, IfNotPresent or Never": "Sometimes",
	"must be an image reference, [registry[:port]/]repository[:tag][@digest] with the repository in lower case, e.g. docker.io/library/redis:7.4-alpine": "Redis:7",
	"schedule must be five cron fields or a descriptor such as @daily or @every 6h, optionally prefixed with CRON_TZ=<zone>":                             "every night at two",
	"deletionPolicy must be Retain or Delete":                                                 "Purge",
	"overwrite must be Refuse, Clean or Merge":                                                "Sometimes",
	"a bucket name must be 3 to 63 characters long":                                           "ab",
	"a bucket name may contain only lowercase letters, digits, dots (.) and hyphens (-)":      "My_Bucket",
	"a bucket name must begin and end with a lowercase letter or a digit":                     "-backups",
	"a bucket name must not contain two adjacent dots (..)":                                   "my..bucket",
	"in a bucket name a dot must not be next to a hyphen (.- or -.)":                          "my.-bucket",
	"a bucket name must not be formatted as an IP address":                                    "192.168.1.1",
	"a bucket name must not start with xn--":                                                  "xn--backups",
	"a bucket name must not end with -s3alias or --ol-s3 (reserved for access point aliases)": "backups-s3alias",
}

// objectRuleMutations break the CEL rules on an object (the path of the object is passed), by
// the rule's message.
var objectRuleMutations = map[string]func(u *unstructured.Unstructured, path []string){
	"metadata.name must be a DNS label (at most 63 characters, lower case, starting with a letter): it names the Service": func(u *unstructured.Unstructured, _ []string) {
		u.SetName("9" + u.GetGenerateName() + "starts-with-a-digit")
		u.SetGenerateName("")
	},
	"set the time zone either in timeZone or as a CRON_TZ= prefix of schedule, not both": func(u *unstructured.Unstructured, path []string) {
		_ = unstructured.SetNestedField(u.Object, "UTC", append(path, "timeZone")...)
		_ = unstructured.SetNestedField(u.Object, "CRON_TZ=UTC 0 2 * * *", append(path, "schedule")...)
	},
	"set exactly one of source.pvcBackup and source.s3": func(u *unstructured.Unstructured, path []string) {
		unstructured.RemoveNestedField(u.Object, append(path, "pvcBackup")...)
		unstructured.RemoveNestedField(u.Object, append(path, "s3")...)
	},
	"set exactly one of target.pvcName and target.newPVC": func(u *unstructured.Unstructured, path []string) {
		unstructured.RemoveNestedField(u.Object, append(path, "target", "pvcName")...)
		unstructured.RemoveNestedField(u.Object, append(path, "target", "newPVC")...)
	},
}

// invalidRejected sends, for each example, the example itself (which must be accepted) and then
// copies of it that each break one rule of its CRD version's schema, as server-side dry runs: the
// API server runs admission and validation and stores nothing. Each copy must be rejected as
// Invalid, with a message naming the field and saying what is wrong.
func invalidRejected(ctx context.Context, env *Env, r *recorder) {
	b := env.Bundle
	if len(b.Samples) == 0 {
		r.errorf("the CSV has no alm-examples to break")
		return
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: fieldManager}
	for _, s := range b.Samples {
		name := bundle.SampleName(s)
		gvr, err := b.Resource(s)
		if err != nil {
			r.errorf("%s: %v", name, err)
			continue
		}
		crd := b.CRDFor(s.GroupVersionKind().GroupKind())
		root := bundle.Schema(crd, s.GroupVersionKind().Version)
		if root == nil {
			r.errorf("%s: the CRD has no schema for version %s", name, s.GroupVersionKind().Version)
			continue
		}
		base := s.DeepCopy()
		base.SetNamespace(env.Namespace)
		base.SetGenerateName(s.GetName() + "-")
		base.SetName("")
		res := env.Client.Resource(gvr).Namespace(env.Namespace)
		if _, err := res.Create(ctx, base, dryRun); err != nil {
			r.errorf("%s: the example itself is rejected, so its broken copies prove nothing: %v", name, err)
			continue
		}
		muts, skipped := mutationsFor(s, root)
		for _, sk := range skipped {
			r.logf("%s: not exercised: %s", name, sk)
		}
		if len(muts) == 0 {
			r.errorf("%s: found no rule of the schema to break in the fields the example sets", name)
			continue
		}
		rejected := 0
		for _, m := range muts {
			obj := base.DeepCopy()
			m.apply(obj)
			_, err := res.Create(ctx, obj, dryRun)
			switch {
			case err == nil:
				r.errorf("%s: %s was accepted; the CRD should reject it", name, m.what)
			case !apierrors.IsInvalid(err):
				r.errorf("%s: %s: rejected, but not as Invalid (%s): %v", name, m.what, apierrors.ReasonForError(err), err)
			case !strings.Contains(err.Error(), m.field) || !strings.Contains(err.Error(), m.want):
				r.errorf("%s: %s: rejected with an unclear message (want it to name %q and say %q): %v", name, m.what, m.field, m.want, err)
			default:
				rejected++
				r.logf("%s: %s: rejected: %s", name, m.what, causes(err))
			}
		}
		r.logf("%s: %d of %d broken copies rejected", name, rejected, len(muts))
	}
}

// causes is the field errors of an Invalid error, one per line, or its message.
func causes(err error) string {
	var st apierrors.APIStatus
	if s, ok := err.(apierrors.APIStatus); ok {
		st = s
	}
	if st == nil || st.Status().Details == nil || len(st.Status().Details.Causes) == 0 {
		return err.Error()
	}
	var parts []string
	for _, c := range st.Status().Details.Causes {
		parts = append(parts, fmt.Sprintf("%s: %s", c.Field, c.Message))
	}
	return strings.Join(parts, "; ")
}

// mutationsFor derives the broken copies of an example from its CRD version's schema: for every
// field the example sets, one copy per bound, enum, length, pattern and CEL rule of that field;
// and one copy per CEL rule on the objects the example sets (the root, spec, spec.source, ...).
// It also says which rules it could not break with a create.
func mutationsFor(s *unstructured.Unstructured, root *apiextensionsv1.JSONSchemaProps) (muts []mutation, skipped []string) {
	spec, _ := s.Object["spec"].(map[string]any)
	for _, p := range leafPaths(spec, "") {
		field := "spec." + p
		sch, err := schemaAt(root, field)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s is not in the schema", field))
			continue
		}
		muts = append(muts, fieldMutations(field, sch)...)
		for _, rule := range sch.XValidations {
			v, ok := leafRuleValues[rule.Message]
			if !ok {
				skipped = append(skipped, fmt.Sprintf("CEL rule %q on %s: no value known to break it", rule.Message, field))
				continue
			}
			muts = append(muts, set(fmt.Sprintf("%s = %v (CEL rule)", field, v), field, rule.Message, v))
		}
	}
	// Object-level rules, on every object the example sets.
	objects := [][]string{nil}
	for _, p := range objectPaths(s.Object, nil) {
		objects = append(objects, p)
	}
	for _, path := range objects {
		sch := root
		if len(path) > 0 {
			var err error
			if sch, err = schemaAt(root, strings.Join(path, ".")); err != nil {
				continue
			}
		}
		if sch.Type != "object" && len(path) > 0 {
			continue
		}
		for _, rule := range sch.XValidations {
			at := strings.Join(path, ".")
			if strings.Contains(rule.Rule, "oldSelf") {
				skipped = append(skipped, fmt.Sprintf("transition rule %q on %s: needs an update, not a create", rule.Message, orRoot(at)))
				continue
			}
			f, ok := objectRuleMutations[rule.Message]
			if !ok {
				skipped = append(skipped, fmt.Sprintf("CEL rule %q on %s: no mutation known to break it", rule.Message, orRoot(at)))
				continue
			}
			path := path
			muts = append(muts, mutation{what: fmt.Sprintf("%s breaking %q (CEL rule)", orRoot(at), rule.Message),
				field: at, want: rule.Message, apply: func(u *unstructured.Unstructured) { f(u, path) }})
		}
	}
	return muts, skipped
}

func orRoot(path string) string {
	if path == "" {
		return "the object"
	}
	return path
}

// objectPaths are the paths of the non-empty objects below obj (metadata excluded).
func objectPaths(obj map[string]any, prefix []string) [][]string {
	var out [][]string
	for _, k := range sortedKeys(obj) {
		if len(prefix) == 0 && (k == "metadata" || k == "status") {
			continue
		}
		if m, ok := obj[k].(map[string]any); ok && len(m) > 0 {
			p := append(append([]string{}, prefix...), k)
			out = append(out, p)
			out = append(out, objectPaths(m, p)...)
		}
	}
	return out
}

// fieldMutations break the OpenAPI constraints of one field.
func fieldMutations(field string, sch *apiextensionsv1.JSONSchemaProps) []mutation {
	var out []mutation
	integer := sch.Type == "integer" || sch.Type == "number"
	stringy := sch.Type == "string" || sch.XIntOrString
	if integer && sch.Minimum != nil {
		v := int64(*sch.Minimum) - 1
		out = append(out, set(fmt.Sprintf("%s = %d (minimum %v)", field, v, *sch.Minimum), field, "greater than or equal to", v))
	}
	if integer && sch.Maximum != nil {
		v := int64(*sch.Maximum) + 1
		out = append(out, set(fmt.Sprintf("%s = %d (maximum %v)", field, v, *sch.Maximum), field, "less than or equal to", v))
	}
	if len(sch.Enum) > 0 {
		v := "not-a-documented-value"
		out = append(out, set(fmt.Sprintf("%s = %q (enum)", field, v), field, "Unsupported value", v))
	}
	if stringy && sch.Pattern != "" {
		if v, ok := notMatching(sch); ok {
			out = append(out, set(fmt.Sprintf("%s = %q (pattern %s)", field, v, sch.Pattern), field, "should match", v))
		}
	}
	if sch.Type == "string" && sch.MaxLength != nil {
		v := strings.Repeat("a", int(*sch.MaxLength)+1)
		out = append(out, set(fmt.Sprintf("%s = %d characters (maxLength %d)", field, len(v), *sch.MaxLength), field, "Too long", v))
	}
	if sch.Type == "string" && sch.MinLength != nil && *sch.MinLength > 0 {
		out = append(out, set(fmt.Sprintf("%s = \"\" (minLength %d)", field, *sch.MinLength), field, "at least", ""))
	}
	return out
}

// notMatching is a string within the field's length bounds that its pattern rejects.
func notMatching(sch *apiextensionsv1.JSONSchemaProps) (string, bool) {
	re, err := regexp.Compile(sch.Pattern)
	if err != nil {
		return "", false
	}
	for _, c := range []string{"Not Valid!", "not valid", "-", "/not-valid", "!"} {
		if re.MatchString(c) {
			continue
		}
		if sch.MinLength != nil && int64(len(c)) < *sch.MinLength || sch.MaxLength != nil && int64(len(c)) > *sch.MaxLength {
			continue
		}
		return c, true
	}
	return "", false
}

func set(what, field, want string, v any) mutation {
	path := strings.Split(field, ".")
	return mutation{what: what, field: field, want: want, apply: func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, jsonValue(v), path...)
	}}
}

// jsonValue makes v storable in an unstructured object.
func jsonValue(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case float64:
		if x == float64(int64(x)) {
			return int64(x)
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return v
}
