package checks

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	scapi "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/okgoes/okgoes-operator/scorecard/internal/bundle"
)

func loadBundle(t *testing.T) *bundle.Bundle {
	t.Helper()
	b, err := bundle.Load(filepath.Join(repoRoot(t), "bundle"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func runStatic(t *testing.T, name string, b *bundle.Bundle) scapi.TestResult {
	t.Helper()
	test := Find(name)
	if test == nil || test.Cluster {
		t.Fatalf("%s is not a static test", name)
	}
	return test.Run(context.Background(), &Env{Bundle: b})
}

func TestStaticChecksPassOnTheBundle(t *testing.T) {
	b := loadBundle(t)
	for _, test := range Tests {
		if test.Cluster {
			continue
		}
		t.Run(test.Name, func(t *testing.T) {
			res := runStatic(t, test.Name, b)
			if res.State != scapi.PassState {
				t.Fatalf("state %s, errors:\n%s", res.State, strings.Join(res.Errors, "\n"))
			}
			t.Logf("\n%s", res.Log)
		})
	}
}

// Each static test reports fail, naming the problem, on a bundle broken the way it looks for.
func TestStaticChecksFailOnABrokenBundle(t *testing.T) {
	owned := func(b *bundle.Bundle, kind, version string) *bundle.OwnedCRD {
		for i, o := range b.CSV.Spec.CustomResourceDefinitions.Owned {
			if o.Kind == kind && o.Version == version {
				return &b.CSV.Spec.CustomResourceDefinitions.Owned[i]
			}
		}
		t.Fatalf("no owned %s %s", kind, version)
		return nil
	}
	sample := func(b *bundle.Bundle, name string) *unstructured.Unstructured {
		for _, s := range b.Samples {
			if s.GetName() == name {
				return s
			}
		}
		t.Fatalf("no sample %s", name)
		return nil
	}
	for _, c := range []struct {
		test, want string
		breakIt    func(b *bundle.Bundle)
	}{
		{"alm-examples-have-spec", "PVCBackup v1/pvcbackup-sample: the example has no spec", func(b *bundle.Bundle) {
			delete(sample(b, "pvcbackup-sample").Object, "spec")
		}},
		{"alm-examples-have-spec", "owned CRD pvcrestores.storage.okgoes.com has no alm-example", func(b *bundle.Bundle) {
			b.Samples = b.Samples[:3]
		}},
		{"crds-have-validation", "example rediscache-sample-v1beta1 sets spec.redis.maxConnections, which the schema does not declare", func(b *bundle.Bundle) {
			_ = unstructured.SetNestedField(sample(b, "rediscache-sample-v1beta1").Object, int64(5), "spec", "redis", "maxConnections")
		}},
		{"crds-have-validation", "pvcrestores.storage.okgoes.com/v1: no openAPIV3Schema", func(b *bundle.Bundle) {
			crd := crdNamed(b, "pvcrestores.storage.okgoes.com")
			crd.Spec.Versions[0].Schema = nil
		}},
		{"crds-have-resources", "pvcbackups.storage.okgoes.com/v1: lists no resources", func(b *bundle.Bundle) {
			owned(b, "PVCBackup", "v1").Resources = nil
		}},
		{"crds-have-resources", "lists DaemonSet, but no permission in the CSV lets the operator create daemonsets", func(b *bundle.Bundle) {
			o := owned(b, "RedisCache", "v1beta1")
			o.Resources = append(o.Resources, bundle.Resource{Kind: "DaemonSet", Version: "v1"})
		}},
		{"descriptors-cover-samples", "example rediscache-sample-v1beta1 sets spec.redis.maxClients, which no specDescriptor describes", func(b *bundle.Bundle) {
			o := owned(b, "RedisCache", "v1beta1")
			o.SpecDescriptors = slices.DeleteFunc(o.SpecDescriptors, func(d bundle.Descriptor) bool { return strings.HasPrefix(d.Path, "redis") })
		}},
		// What operator-sdk scorecard's olm-spec-descriptors fails on: descriptors of leaves only.
		{"descriptors-cover-samples", "example rediscache-sample-v1beta1 sets spec.redis, which has no specDescriptor of its own", func(b *bundle.Bundle) {
			o := owned(b, "RedisCache", "v1beta1")
			o.SpecDescriptors = slices.DeleteFunc(o.SpecDescriptors, func(d bundle.Descriptor) bool { return d.Path == "redis" })
		}},
		{"descriptors-cover-samples", "example pvcrestore-sample sets spec.source, which has no specDescriptor of its own", func(b *bundle.Bundle) {
			o := owned(b, "PVCRestore", "v1")
			o.SpecDescriptors = slices.DeleteFunc(o.SpecDescriptors, func(d bundle.Descriptor) bool { return d.Path == "source" })
			o.SpecDescriptors = append(o.SpecDescriptors, bundle.Descriptor{Path: "source.pvcBackup"}, bundle.Descriptor{Path: "source.backupID"})
		}},
		{"descriptors-cover-samples", "statusDescriptor \"lastBackups\" points at no field of the schema", func(b *bundle.Bundle) {
			o := owned(b, "PVCBackup", "v1")
			o.StatusDescriptors[0].Path = "lastBackups"
		}},
		{"descriptors-cover-samples", "specDescriptor \"targets[0].newPVC.colour\" points at no field of the schema", func(b *bundle.Bundle) {
			o := owned(b, "PVCRestore", "v1")
			o.SpecDescriptors = append(o.SpecDescriptors, bundle.Descriptor{Path: "targets[0].newPVC.colour"})
		}},
		{"descriptors-cover-samples", "status.conditions has no statusDescriptor with x-descriptor urn:alm:descriptor:io.kubernetes.conditions", func(b *bundle.Bundle) {
			o := owned(b, "PVCRestore", "v1")
			o.StatusDescriptors = o.StatusDescriptors[:len(o.StatusDescriptors)-1]
		}},
	} {
		t.Run(c.test+": "+c.want, func(t *testing.T) {
			b := loadBundle(t)
			c.breakIt(b)
			res := runStatic(t, c.test, b)
			if res.State != scapi.FailState {
				t.Fatalf("state %s, want fail", res.State)
			}
			for _, e := range res.Errors {
				if strings.Contains(e, c.want) {
					return
				}
			}
			t.Fatalf("no error says %q:\n%s", c.want, strings.Join(res.Errors, "\n"))
		})
	}
}

// The broken copies come from the schema: bounds, enums, lengths, patterns and CEL rules of the
// fields the example sets, plus the object-level CEL rules.
func TestMutationsFromTheSchema(t *testing.T) {
	b := loadBundle(t)
	want := map[string][]string{
		"rediscache-sample": {
			"spec.replicas = -1 (minimum 0)", "spec.replicas = 101 (maximum 100)",
			"spec.eviction.policy = lru (CEL rule)", "spec.eviction.maxMemory = 512Ki (CEL rule)",
			`the object breaking "metadata.name must be a DNS label`,
		},
		"pvcbackup-sample": {
			"spec.schedule = every night at two (CEL rule)", "spec.startingDeadlineSeconds = -1 (minimum 0)",
			"spec.deletionPolicy = Purge (CEL rule)", "spec.s3Bucket = 254 characters (maxLength 253)",
			"spec.s3Bucket = 192.168.1.1 (CEL rule)", "spec.s3Bucket = my..bucket (CEL rule)",
			`spec breaking "set the time zone either in timeZone or as a CRON_TZ= prefix of schedule, not both"`,
		},
		"pvcrestore-sample": {
			`spec.source breaking "set exactly one of source.pvcBackup and source.s3"`,
			`spec breaking "set exactly one of target.pvcName and target.newPVC"`,
		},
	}
	for _, s := range b.Samples {
		crd := b.CRDFor(s.GroupVersionKind().GroupKind())
		muts, skipped := mutationsFor(s, bundle.Schema(crd, s.GroupVersionKind().Version))
		var whats []string
		for _, m := range muts {
			whats = append(whats, m.what)
			// Every copy differs from the example, in the field it names.
			obj := s.DeepCopy()
			obj.SetGenerateName(s.GetName() + "-")
			before := obj.DeepCopy()
			m.apply(obj)
			if equalObjects(before, obj) {
				t.Errorf("%s: %s changes nothing", s.GetName(), m.what)
			}
		}
		all := strings.Join(whats, "\n")
		for _, w := range want[s.GetName()] {
			if !strings.Contains(all, w) {
				t.Errorf("%s: no mutation %q in:\n%s", s.GetName(), w, all)
			}
		}
		if s.GetName() == "pvcrestore-sample" && !strings.Contains(strings.Join(skipped, "\n"), "transition rule") {
			t.Errorf("the PVCRestore spec immutability rule should be reported as not exercised: %v", skipped)
		}
	}
}

func equalObjects(a, b *unstructured.Unstructured) bool {
	ja, _ := a.MarshalJSON()
	jb, _ := b.MarshalJSON()
	return string(ja) == string(jb)
}

func TestExpectations(t *testing.T) {
	obj := func(kind string, gen, observed int64, cond map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"kind": kind, "metadata": map[string]any{"generation": gen},
			"status": map[string]any{"observedGeneration": observed}}}
		if cond != nil {
			u.Object["status"].(map[string]any)["conditions"] = []any{cond}
		}
		return u
	}
	cond := func(typ, status, reason string, gen int64) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "observedGeneration": gen}
	}
	for _, c := range []struct {
		name string
		u    *unstructured.Unstructured
		ok   bool
	}{
		{"ready cache", obj("RedisCache", 2, 2, cond("Ready", "True", "Available", 2)), true},
		{"cache not ready", obj("RedisCache", 2, 2, cond("Ready", "False", "ReplicasNotReady", 2)), false},
		{"cache of an older generation", obj("RedisCache", 3, 2, cond("Ready", "True", "Available", 2)), false},
		{"condition of an older generation", obj("RedisCache", 3, 3, cond("Ready", "True", "Available", 2)), false},
		{"no status", obj("RedisCache", 1, 0, nil), false},
		{"backup waiting for its PVC", obj("PVCBackup", 1, 1, cond("Ready", "False", "PVCNotFound", 1)), true},
		{"backup with an undocumented reason", obj("PVCBackup", 1, 1, cond("Ready", "False", "Whatever", 1)), false},
		{"restore waiting for credentials", obj("PVCRestore", 1, 1, cond("Complete", "False", "CredentialsNotFound", 1)), true},
		{"restore with a Ready condition only", obj("PVCRestore", 1, 1, cond("Ready", "True", "Restored", 1)), false},
		{"unknown kind ready", obj("Other", 1, 1, cond("Ready", "True", "Anything", 1)), true},
		{"unknown kind not ready", obj("Other", 1, 1, cond("Ready", "False", "Anything", 1)), false},
	} {
		if ok, state := expectationFor(c.u.GetKind()).check(c.u); ok != c.ok {
			t.Errorf("%s: ok=%v, want %v (%s)", c.name, ok, c.ok, state)
		}
	}
}
