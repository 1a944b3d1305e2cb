package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"sigs.k8s.io/yaml"
)

// committedCSV is the CSV of bundle/.
func committedCSV(t *testing.T) *operatorsv1alpha1.ClusterServiceVersion {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(committed.root, "bundle", "manifests", packageName+".clusterserviceversion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	if err := yaml.Unmarshal(data, csv); err != nil {
		t.Fatal(err)
	}
	return csv
}

// The console shows what the markers of api/ say: every descriptor has a human display name and
// a description, and the names of the issue read as written.
func TestDescriptorsReadAsHumansWrite(t *testing.T) {
	spelled := regexp.MustCompile(`\b[A-Z0-9] [A-Z0-9]\b`) // "Backup I D", "S H A256"
	want := map[string]string{                             // kind version spec|status path -> displayName
		"PVCRestore v1 spec source.backupID":             "Backup ID",
		"PVCRestore v1 status backupID":                  "Backup ID",
		"PVCRestore v1 status verifiedSHA256":            "Verified SHA-256",
		"RedisCache v1beta1 spec replicas":               "Replicas",
		"PVCBackup v1 spec s3":                           "S3",
		"PVCBackup v1 spec s3.credentialsSecretRef.name": "Secret Name",
	}
	xwant := map[string]string{
		"RedisCache v1beta1 spec replicas":                  "urn:alm:descriptor:com.tectonic.ui:podCount",
		"RedisCache v1alpha1 spec resources":                "urn:alm:descriptor:com.tectonic.ui:resourceRequirements",
		"RedisCache v1beta1 spec redis.auth.secretRef.name": "urn:alm:descriptor:io.kubernetes:Secret",
		"PVCBackup v1 spec s3.insecure":                     "urn:alm:descriptor:com.tectonic.ui:booleanSwitch",
		"PVCBackup v1 spec startingDeadlineSeconds":         "urn:alm:descriptor:com.tectonic.ui:number",
		"PVCRestore v1 status conditions":                   "urn:alm:descriptor:io.kubernetes.conditions",
	}
	seen := map[string]bool{}
	check := func(key, name, desc string, x []string) {
		seen[key] = true
		if name == "" || spelled.MatchString(name) {
			t.Errorf("%s: displayName %q", key, name)
		}
		if desc == "" {
			t.Errorf("%s: no description", key)
		}
		if w, ok := want[key]; ok && name != w {
			t.Errorf("%s: displayName %q, want %q", key, name, w)
		}
		if w, ok := xwant[key]; ok && !strings.Contains(strings.Join(x, " "), w) {
			t.Errorf("%s: x-descriptors %q, want %s", key, x, w)
		}
	}
	for _, o := range committedCSV(t).Spec.CustomResourceDefinitions.Owned {
		if o.DisplayName == "" || len(o.Resources) == 0 {
			t.Errorf("%s %s: displayName %q, resources %v", o.Kind, o.Version, o.DisplayName, o.Resources)
		}
		for _, d := range o.SpecDescriptors {
			check(o.Kind+" "+o.Version+" spec "+d.Path, d.DisplayName, d.Description, d.XDescriptors)
		}
		for _, d := range o.StatusDescriptors {
			check(o.Kind+" "+o.Version+" status "+d.Path, d.DisplayName, d.Description, d.XDescriptors)
		}
	}
	for key := range want {
		if !seen[key] {
			t.Errorf("no descriptor %s", key)
		}
	}
	for key := range xwant {
		if !seen[key] {
			t.Errorf("no descriptor %s", key)
		}
	}
}

// Every top-level spec key of every alm-example has a descriptor of its own: what operator-sdk
// scorecard's olm-spec-descriptors test checks.
func TestTopLevelKeysOfTheExamplesAreDescribed(t *testing.T) {
	csv := committedCSV(t)
	var examples []map[string]any
	if err := yaml.Unmarshal([]byte(csv.Annotations["alm-examples"]), &examples); err != nil {
		t.Fatal(err)
	}
	for _, ex := range examples {
		kind, _ := ex["kind"].(string)
		apiVersion, _ := ex["apiVersion"].(string)
		_, version, _ := strings.Cut(apiVersion, "/")
		found := false
		for _, o := range csv.Spec.CustomResourceDefinitions.Owned {
			if o.Kind != kind || o.Version != version {
				continue
			}
			found = true
			if err := samplesDescribed(ex, o); err != nil {
				t.Error(err)
			}
		}
		if !found {
			t.Errorf("%s %s: not an owned CRD", kind, version)
		}
	}
}

// The generator refuses a sample whose top-level key has no descriptor, naming it, and a marker
// without a display name or of the wrong type; it reads nested, inline, pointer and slice fields.
func TestDescriptorMarkers(t *testing.T) {
	root := t.TempDir()
	write := func(path, data string) {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.26\n")
	types := `package v1

// Thing is a kind.
// +operator-sdk:csv:customresourcedefinitions:displayName="Thing",resources={{Deployment,v1},{Secret,v1,""}}
type Thing struct {
	Meta ` + "`json:\",inline\"`" + `
	Spec ThingSpec ` + "`json:\"spec\"`" + `
	Status ThingStatus ` + "`json:\"status\"`" + `
}

// Meta is inlined.
type Meta struct {
	// Kind is not described.
	Kind string ` + "`json:\"kind\"`" + `
}

// ThingSpec is the spec.
type ThingSpec struct {
	// Size of the thing.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Size",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"},order=2
	Size int32 ` + "`json:\"size\"`" + `
	// Parts of the thing.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Parts",order=1
	Parts []Part ` + "`json:\"parts,omitempty\"`" + `
	// Secret holds
	// the password.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Secret",xDescriptors={"urn:alm:descriptor:io.kubernetes:Secret"}
	Secret *Ref ` + "`json:\"secret\"`" + `
	Plain string ` + "`json:\"plain\"`" + `
	hidden string
}

// Part is one part.
type Part struct {
	// Name of the part.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Part Name"
	Name string ` + "`json:\"name\"`" + `
}

// Ref names a Secret.
type Ref struct {
	// Name of the Secret.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Secret Name"
	Name string ` + "`json:\"name\"`" + `
}

// ThingStatus is the status.
type ThingStatus struct {
	// BackupID is the id.
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Backup ID"
	BackupID string ` + "`json:\"backupID\"`" + `
}
`
	write("api/things/v1/types.go", types)
	api, err := loadAPITypes(root)
	if err != nil {
		t.Fatal(err)
	}
	d, err := api.describe("things.example.com", "v1", "Thing")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range d.spec {
		got = append(got, s.Path+"="+s.DisplayName+"|"+s.Description+"|"+strings.Join(s.XDescriptors, ","))
	}
	want := []string{
		"parts=Parts|Parts of the thing.|",
		"size=Size|Size of the thing.|urn:alm:descriptor:com.tectonic.ui:number",
		"parts[0].name=Part Name|Name of the part.|",
		"secret=Secret|Secret holds the password.|urn:alm:descriptor:io.kubernetes:Secret",
		"secret.name=Secret Name|Name of the Secret.|",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("spec descriptors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(d.status) != 1 || d.status[0].Path != "backupID" || d.status[0].DisplayName != "Backup ID" {
		t.Errorf("status descriptors %+v", d.status)
	}
	if d.displayName != "Thing" || len(d.resources) != 2 || d.resources[1].Kind != "Secret" {
		t.Errorf("kind: %q %+v", d.displayName, d.resources)
	}

	desc := operatorsv1alpha1.CRDDescription{Kind: "Thing", Version: "v1", SpecDescriptors: d.spec}
	err = samplesDescribed(map[string]any{"spec": map[string]any{"size": 1, "plain": "x", "secret": map[string]any{"name": "s"}}}, desc)
	if err == nil || !strings.Contains(err.Error(), "spec.plain, which has no spec descriptor") {
		t.Errorf("a sample setting an undescribed key: %v", err)
	}
	err = samplesDescribed(map[string]any{"spec": map[string]any{"size": 1}, "status": map[string]any{"x": 1}}, desc)
	if err == nil || !strings.Contains(err.Error(), "no status descriptor") {
		t.Errorf("a sample with a status: %v", err)
	}

	for _, c := range []struct{ marker, want string }{
		{`type=spec`, "has no displayName"},
		{`type=status,displayName="Size"`, "its marker says type=status"},
		{`type=specs,displayName="Size"`, `type="specs", want spec or status`},
	} {
		write("api/things/v1/types.go", strings.Replace(types, `type=spec,displayName="Size",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"},order=2`, c.marker, 1))
		api, err := loadAPITypes(root)
		if err == nil {
			_, err = api.describe("things.example.com", "v1", "Thing")
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("marker %s: %v, want an error with %q", c.marker, err, c.want)
		}
	}
}

// com.redhat.openshift.versions follows minKubeVersion, and bundle.Dockerfile labels the image
// with exactly the annotations of bundle/metadata (community-operators-prod compares them).
func TestOpenShiftVersionsAndDockerfileLabels(t *testing.T) {
	for in, want := range map[string]string{"1.30.0": "v4.17", "1.25.0": "v4.12", "1.33": "v4.20", "v1.31.2": "v4.18"} {
		if got, err := openShiftVersions(in); err != nil || got != want {
			t.Errorf("openShiftVersions(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"1.24.0", "2.0.0", "latest"} {
		if got, err := openShiftVersions(in); err == nil {
			t.Errorf("openShiftVersions(%q) = %q, want an error", in, got)
		}
	}
	if files, err := metadataFiles(committed, ""); err != nil || strings.Contains(string(files[0].data), "openshift") {
		t.Errorf("without minKubeVersion: %v\n%s", err, files[0].data)
	}

	data, err := os.ReadFile(filepath.Join(committed.root, "bundle", "metadata", "annotations.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var annotations struct{ Annotations map[string]string }
	if err := yaml.Unmarshal(data, &annotations); err != nil {
		t.Fatal(err)
	}
	dockerfile, err := os.ReadFile(filepath.Join(committed.root, "bundle.Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	for _, line := range strings.Split(string(dockerfile), "\n") {
		if k, v, ok := strings.Cut(strings.TrimPrefix(line, "LABEL "), "="); ok && strings.HasPrefix(line, "LABEL ") {
			labels[k] = v
		}
	}
	if len(labels) != len(annotations.Annotations) {
		t.Errorf("bundle.Dockerfile has %d labels, annotations.yaml %d annotations", len(labels), len(annotations.Annotations))
	}
	for k, v := range annotations.Annotations {
		if labels[k] != v {
			t.Errorf("annotation %s=%s, label %q", k, v, labels[k])
		}
	}
	csv := committedCSV(t)
	if want, _ := openShiftVersions(csv.Spec.MinKubeVersion); csv.Spec.MinKubeVersion == "" || annotations.Annotations["com.redhat.openshift.versions"] != want {
		t.Errorf("minKubeVersion %q, com.redhat.openshift.versions %q", csv.Spec.MinKubeVersion, annotations.Annotations["com.redhat.openshift.versions"])
	}
}

// Several samples of one kind and version are all kept, and all checked: one per RedisCache mode.
func TestReadSamplesKeepsEverySampleOfAKind(t *testing.T) {
	dir := t.TempDir()
	for name, spec := range map[string]string{"a.yaml": "size: 1", "b.yaml": "plain: x"} {
		doc := "apiVersion: things.example.com/v1\nkind: Thing\nmetadata:\n  name: " + name[:1] + "\nspec:\n  " + spec + "\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	byKind, examples, err := readSamples(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(byKind[sampleKey("Thing", "v1")]); n != 2 || !strings.Contains(examples, `"plain": "x"`) {
		t.Fatalf("%d samples of Thing v1, alm-examples %s", n, examples)
	}
	desc := operatorsv1alpha1.CRDDescription{Kind: "Thing", Version: "v1",
		SpecDescriptors: []operatorsv1alpha1.SpecDescriptor{{Path: "size", DisplayName: "Size"}}}
	failed := 0
	for _, s := range byKind[sampleKey("Thing", "v1")] {
		if samplesDescribed(s, desc) != nil {
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("%d of the 2 samples failed the descriptor check, want the one setting spec.plain", failed)
	}
}
