package pvcbackup

import (
	"fmt"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7/pkg/s3utils"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The admission stories apply PVCBackups and PVCRestores the way a user does, as YAML with one
// field changed, and read what the API server answers. No controller and no MinIO take part: every
// create is a server-side dry run, so nothing is stored.

const backupManifest = `
apiVersion: storage.okgoes.com/v1
kind: PVCBackup
metadata: {name: app-data}
spec:
  pvcName: data
  schedule: "0 2 * * *"
  s3Bucket: backups
  s3:
    endpoint: minio.backup.svc:9000
    credentialsSecretRef: {name: s3-credentials}
`

const restoreManifest = `
apiVersion: storage.okgoes.com/v1
kind: PVCRestore
metadata: {name: app-data-restore}
spec:
  source:
    s3:
      bucket: backups
      namespace: default
      pvcBackup: app-data
      location:
        endpoint: minio.backup.svc:9000
        credentialsSecretRef: {name: s3-credentials}
  target:
    newPVC: {name: data-restored, size: 10Gi}
`

// What the API server adds when a schema error kept it from running the CEL rules, and what it
// says when the rules ran out of cost budget: neither may follow a single mistake.
var rulesNotChecked = []string{"some validation rules were not checked", "cost budget", "cost exceeds"}

// admissionNamespace is a fresh namespace for dry-run creates.
func admissionNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-"}}
	if err := k8s.Create(testCtx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(testCtx, ns) })
	return ns.Name
}

// manifest is the object of a YAML manifest in namespace ns, with each "dotted.path": value of
// edits applied (a nil value removes the field).
func manifest(t *testing.T, doc, ns string, edits map[string]any) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetNamespace(ns)
	for path, v := range edits {
		fields := strings.Split(path, ".")
		if v == nil {
			unstructured.RemoveNestedField(u.Object, fields...)
			continue
		}
		if err := unstructured.SetNestedField(u.Object, v, fields...); err != nil {
			t.Fatalf("set %s: %v", path, err)
		}
	}
	return u
}

// apply creates u as a server-side dry run.
func apply(u *unstructured.Unstructured) error {
	return k8s.Create(testCtx, u, client.DryRunAll)
}

// wantRejected fails unless err is an Invalid that names field and says each of messages, and
// nothing of rulesNotChecked.
func wantRejected(t *testing.T, err error, field string, messages ...string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want Invalid naming %s: %v, got %v", field, messages, err)
	}
	for _, m := range append([]string{field}, messages...) {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("the error does not say %q: %v", m, err)
		}
	}
	for _, m := range rulesNotChecked {
		if strings.Contains(err.Error(), m) {
			t.Errorf("the error says %q: not every rule was checked: %v", m, err)
		}
	}
}

// Bucket names that S3 (and minio-go, before it sends anything) refuses are refused at admission,
// each with the rule it breaks, on both places a bucket is named; names S3 takes are admitted.
func TestAdmissionChecksS3BucketNames(t *testing.T) {
	ns := admissionNamespace(t)
	places := []struct {
		kind, doc, field string
	}{
		{"PVCBackup", backupManifest, "spec.s3Bucket"},
		{"PVCRestore", restoreManifest, "spec.source.s3.bucket"},
	}
	valid := []string{"backups", "abc", "my.bucket.name", "my-bucket-2026", "1st-bucket", "xn-single-hyphen",
		"s3alias-first", "192.168.1.1.5", strings.Repeat("a", 63)}
	invalid := []struct {
		name, message string
	}{
		{"192.168.1.1", "a bucket name must not be formatted as an IP address"},
		{"my..bucket", "a bucket name must not contain two adjacent dots (..)"},
		{"ab", "a bucket name must be 3 to 63 characters long"},
		{strings.Repeat("a", 64), "a bucket name must be 3 to 63 characters long"},
		{"My_Bucket", "a bucket name may contain only lowercase letters, digits, dots (.) and hyphens (-)"},
		{"-backups", "a bucket name must begin and end with a lowercase letter or a digit"},
		{"backups.", "a bucket name must begin and end with a lowercase letter or a digit"},
		{"my.-bucket", "in a bucket name a dot must not be next to a hyphen"},
		{"my-.bucket", "in a bucket name a dot must not be next to a hyphen"},
		{"xn--backups", "a bucket name must not start with xn--"},
		{"backups-s3alias", "a bucket name must not end with -s3alias or --ol-s3"},
		{"backups--ol-s3", "a bucket name must not end with -s3alias or --ol-s3"},
	}
	for _, p := range places {
		for _, name := range valid {
			t.Run(p.kind+" admits "+name, func(t *testing.T) {
				if err := s3utils.CheckValidBucketNameStrict(name); err != nil {
					t.Fatalf("the table is wrong: minio-go refuses %q: %v", name, err)
				}
				if err := apply(manifest(t, p.doc, ns, map[string]any{p.field: name})); err != nil {
					t.Errorf("valid bucket name %q rejected: %v", name, err)
				}
			})
		}
		for _, tt := range invalid {
			t.Run(p.kind+" refuses "+tt.name, func(t *testing.T) {
				err := apply(manifest(t, p.doc, ns, map[string]any{p.field: tt.name}))
				wantRejected(t, err, p.field+": Invalid value: \""+tt.name+"\"", tt.message)
			})
		}
	}
}

// An object with one mistake gets that mistake's own message, and the API server checked every
// other rule too: no "some validation rules were not checked" (which a schema enum or maxLength
// violation causes), no cost-budget error. With two mistakes, both are reported.
func TestAdmissionChecksEveryRuleOfAnObjectWithOneMistake(t *testing.T) {
	ns := admissionNamespace(t)
	for _, doc := range []string{backupManifest, restoreManifest} {
		if err := apply(manifest(t, doc, ns, nil)); err != nil {
			t.Fatalf("the valid manifest is rejected: %v", err)
		}
	}
	tests := []struct {
		name     string
		doc      string
		edits    map[string]any
		field    string
		messages []string
	}{
		{"unknown deletion policy", backupManifest, map[string]any{"spec.deletionPolicy": "Purge"},
			"spec.deletionPolicy", []string{"deletionPolicy must be Retain or Delete"}},
		{"bucket name one character too long", backupManifest, map[string]any{"spec.s3Bucket": strings.Repeat("b", 64)},
			"spec.s3Bucket", []string{"a bucket name must be 3 to 63 characters long"}},
		{"bucket name that is an IP address", backupManifest, map[string]any{"spec.s3Bucket": "192.168.1.1"},
			"spec.s3Bucket", []string{"must not be formatted as an IP address"}},
		{"schedule that is not cron", backupManifest, map[string]any{"spec.schedule": "every day"},
			"spec.schedule", []string{"schedule must be five cron fields"}},
		{"time zone twice", backupManifest, map[string]any{"spec.schedule": "CRON_TZ=Europe/Berlin 0 2 * * *", "spec.timeZone": "Europe/Berlin"},
			"spec", []string{"not both"}},
		{"negative deadline", backupManifest, map[string]any{"spec.startingDeadlineSeconds": int64(-1)},
			"spec.startingDeadlineSeconds", []string{"greater than or equal to 0"}},
		{"empty PVC name", backupManifest, map[string]any{"spec.pvcName": ""},
			"spec.pvcName", []string{"at least 1 chars long"}},
		{"endpoint with a scheme", backupManifest, map[string]any{"spec.s3.endpoint": "https://s3.example.com"},
			"spec.s3.endpoint", []string{"should match"}},
		{"retention that keeps nothing", backupManifest, map[string]any{"spec.retention": map[string]any{"keepLast": int64(0)}},
			"spec.retention", []string{"retention must keep at least one backup"}},
		{"unknown key derivation", backupManifest, map[string]any{"spec.kopia": map[string]any{"keyDerivation": "Argon2"}},
			"spec.kopia.keyDerivation", []string{"keyDerivation must be Scrypt or PBKDF2"}},
		{"unknown compression", backupManifest, map[string]any{"spec.kopia": map[string]any{"compression": "lz4"}},
			"spec.kopia.compression", []string{"compression must be one of none, s2-default, s2-better, zstd-fastest, zstd, zstd-better-compression, pgzip"}},
		{"unknown splitter", backupManifest, map[string]any{"spec.kopia": map[string]any{"splitter": "DYNAMIC-3M-BUZHASH"}},
			"spec.kopia.splitter", []string{"splitter must be one of DYNAMIC-512K-BUZHASH,"}},
		{"unknown immutability mode", backupManifest, map[string]any{"spec.kopia": map[string]any{"immutability": map[string]any{"mode": "Legal", "days": int64(7)}}},
			"spec.kopia.immutability.mode", []string{"immutability.mode must be Governance or Compliance"}},
		{"immutability of one day", backupManifest, map[string]any{"spec.kopia": map[string]any{"immutability": map[string]any{"mode": "Compliance", "days": int64(1)}}},
			"spec.kopia.immutability.days", []string{"immutability.days must be from 2 to 3650"}},
		{"immutability of eleven years", backupManifest, map[string]any{"spec.kopia": map[string]any{"immutability": map[string]any{"mode": "Governance", "days": int64(4000)}}},
			"spec.kopia.immutability.days", []string{"immutability.days must be from 2 to 3650"}},
		{"immutability without days", backupManifest, map[string]any{"spec.kopia": map[string]any{"immutability": map[string]any{"mode": "Governance"}}},
			"spec.kopia.immutability", []string{"immutability needs both mode (Governance or Compliance) and days (2 to 3650)"}},
		{"immutability for archives", backupManifest, map[string]any{"spec.engine": "Archive", "spec.kopia": map[string]any{"immutability": map[string]any{"mode": "Compliance", "days": int64(7)}}},
			"spec", []string{"kopia options apply to the Kopia engine only"}},
		{"kopia options for archives", backupManifest, map[string]any{"spec.engine": "Archive", "spec.kopia": map[string]any{"keyDerivation": "PBKDF2"}},
			"spec", []string{"kopia options apply to the Kopia engine only"}},
		{"unknown overwrite policy", restoreManifest, map[string]any{"spec.target.overwrite": "Sometimes"},
			"spec.target.overwrite", []string{"overwrite must be Refuse, Clean or Merge"}},
		{"restore bucket with adjacent dots", restoreManifest, map[string]any{"spec.source.s3.bucket": "my..bucket"},
			"spec.source.s3.bucket", []string{"must not contain two adjacent dots"}},
		{"backup id that is not one", restoreManifest, map[string]any{"spec.source.backupID": "yesterday"},
			"spec.source.backupID", []string{"should match"}},
		{"two sources", restoreManifest, map[string]any{"spec.source.pvcBackup": "app-data"},
			"spec.source", []string{"set exactly one of source.pvcBackup and source.s3"}},
		{"point in time of the latest backup", restoreManifest, map[string]any{"spec.source.pointInTime": "2026-12-01T00:00:00Z", "spec.source.backupID": "latest"},
			"spec.source", []string{"source.pointInTime needs a backupID, not latest"}},
		{"point in time without a backup id", restoreManifest, map[string]any{"spec.source.pointInTime": "2026-12-01T00:00:00Z", "spec.source.backupID": nil},
			"spec.source", []string{"source.pointInTime needs a backupID, not latest"}},
		{"absolute restore path", restoreManifest, map[string]any{"spec.paths": []any{"app/config", "/etc/passwd"}},
			"spec.paths[1]", []string{"a path is relative to the volume's root: remove the leading /"}},
		{"restore path with ..", restoreManifest, map[string]any{"spec.paths": []any{"app/../../etc"}},
			"spec.paths[0]", []string{"a path must not have a .. component"}},
		{"restore path that is ..", restoreManifest, map[string]any{"spec.paths": []any{".."}},
			"spec.paths[0]", []string{"a path must not have a .. component"}},
		{"restore path with .", restoreManifest, map[string]any{"spec.paths": []any{"./app"}},
			"spec.paths[0]", []string{"a path must not have a . component"}},
		{"empty restore path", restoreManifest, map[string]any{"spec.paths": []any{""}},
			"spec.paths[0]", []string{"a path must not be empty"}},
		{"restore path with an empty component", restoreManifest, map[string]any{"spec.paths": []any{"app//config"}},
			"spec.paths[0]", []string{"a path must not have an empty component"}},
		{"restore path with a trailing slash", restoreManifest, map[string]any{"spec.paths": []any{"app/"}},
			"spec.paths[0]", []string{"a path must not have an empty component"}},
		{"restore paths with Clean", restoreManifest, map[string]any{"spec.paths": []any{"app"}, "spec.target.overwrite": "Clean"},
			"spec", []string{"paths cannot be combined with target.overwrite Clean"}},
		{"two mistakes: deletion policy and bucket", backupManifest, map[string]any{"spec.deletionPolicy": "Purge", "spec.s3Bucket": "my..bucket"},
			"spec.deletionPolicy", []string{"deletionPolicy must be Retain or Delete", "spec.s3Bucket", "two adjacent dots"}},
		{"two mistakes: overwrite policy and sources", restoreManifest, map[string]any{"spec.target.overwrite": "Sometimes", "spec.source.pvcBackup": "app-data"},
			"spec.target.overwrite", []string{"overwrite must be Refuse, Clean or Merge", "set exactly one of source.pvcBackup and source.s3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := apply(manifest(t, tt.doc, ns, tt.edits))
			wantRejected(t, err, tt.field, tt.messages...)
			t.Logf("%v", err)
		})
	}
}

// spec.paths of a PVCRestore: the schema's bounds (at most 20 paths, each at most 1024 bytes,
// none twice) are refused with the field named; paths a restore can take are admitted.
func TestAdmissionBoundsRestorePaths(t *testing.T) {
	ns := admissionNamespace(t)
	many := make([]any, 21)
	for i := range many {
		many[i] = fmt.Sprintf("dir/%d", i)
	}
	for _, tt := range []struct {
		name     string
		paths    []any
		field    string
		messages []string
	}{
		{"21 paths", many, "spec.paths", []string{"Too many: 21: must have at most 20 items"}},
		{"a path of 1025 bytes", []any{strings.Repeat("a", 1025)}, "spec.paths[0]", []string{"may not be more than 1024"}},
		{"a path twice", []any{"app/config", "db", "app/config"}, "spec.paths[2]", []string{`Duplicate value: "app/config"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := apply(manifest(t, restoreManifest, ns, map[string]any{"spec.paths": tt.paths}))
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want Invalid, got %v", err)
			}
			for _, m := range append([]string{tt.field}, tt.messages...) {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("the error does not say %q: %v", m, err)
				}
			}
		})
	}
	for _, ok := range [][]any{
		many[:20],
		{strings.Repeat("a", 1024)},
		{"app/config", "db/pg_hba.conf", ".hidden/..x", "a b/ünïcode\nnewline", "..."},
		{"app", "app/config"},
	} {
		edits := map[string]any{"spec.paths": ok, "spec.target.overwrite": "Merge"}
		if err := apply(manifest(t, restoreManifest, ns, edits)); err != nil {
			t.Errorf("paths %v are rejected: %v", ok[:min(len(ok), 3)], err)
		}
	}
}

// retention: {keepLast: 0} could mean "keep none" or "keep all" (it used to keep all): a retention
// block must have a rule above 0, and the message says how to keep everything instead.
func TestAdmissionRejectsRetentionThatKeepsNothing(t *testing.T) {
	ns := admissionNamespace(t)
	const message = "retention must keep at least one backup: set keepLast, keepDaily, keepWeekly or keepMonthly, or remove retention to keep all"
	zero := int64(0)
	for _, tt := range []struct {
		name      string
		retention map[string]any // nil: no retention
		admitted  bool
	}{
		{"keepLast 0", map[string]any{"keepLast": zero}, false},
		{"empty retention", map[string]any{}, false},
		{"every rule 0", map[string]any{"keepLast": zero, "keepDaily": zero, "keepWeekly": zero, "keepMonthly": zero}, false},
		{"no retention keeps all", nil, true},
		{"keepLast 1", map[string]any{"keepLast": int64(1)}, true},
		{"keepDaily 7 alone", map[string]any{"keepDaily": int64(7)}, true},
		{"keepLast 0 with keepMonthly 6", map[string]any{"keepLast": zero, "keepMonthly": int64(6)}, true},
		{"keepWeekly 4 alone", map[string]any{"keepWeekly": int64(4)}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			edits := map[string]any{}
			if tt.retention != nil {
				edits["spec.retention"] = tt.retention
			}
			err := apply(manifest(t, backupManifest, ns, edits))
			if tt.admitted {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			wantRejected(t, err, "spec.retention", message)
		})
	}
}

// spec.kopia.immutability at its bounds, in both modes, is admitted, and so is a restore of a
// backup id as of a point in time.
func TestAdmissionAdmitsImmutability(t *testing.T) {
	ns := admissionNamespace(t)
	for _, im := range []map[string]any{
		{"mode": "Governance", "days": int64(2)},
		{"mode": "Compliance", "days": int64(3650)},
	} {
		edits := map[string]any{"spec.kopia": map[string]any{"immutability": im}}
		if err := apply(manifest(t, backupManifest, ns, edits)); err != nil {
			t.Errorf("immutability %v is rejected: %v", im, err)
		}
	}
	edits := map[string]any{"spec.source.pointInTime": "2026-12-01T00:00:00Z", "spec.source.backupID": "20261130T020000Z"}
	if err := apply(manifest(t, restoreManifest, ns, edits)); err != nil {
		t.Errorf("a restore of a backup id as of a point in time is rejected: %v", err)
	}
}
