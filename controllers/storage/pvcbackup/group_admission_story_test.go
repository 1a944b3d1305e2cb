package pvcbackup

import (
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// spec.group is checked at admission: exactly one of pvcName and group, exactly one of
// group.pvcNames and group.selector, 2 to 16 distinct PVC names, no empty selector; and a
// PVCBackup never switches between the two forms.
func TestAdmissionChecksGroups(t *testing.T) {
	ns := admissionNamespace(t)
	names := func(n ...string) map[string]any {
		l := []any{}
		for _, s := range n {
			l = append(l, s)
		}
		return map[string]any{"pvcNames": l}
	}
	selector := map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "db"}}}
	valid := map[string]map[string]any{
		"two names":     names("db", "wal"),
		"a selector":    selector,
		"sixteen names": names("a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "b0", "b1", "b2", "b3", "b4", "b5"),
	}
	for name, group := range valid {
		t.Run("admits "+name, func(t *testing.T) {
			if err := apply(manifest(t, backupManifest, ns, map[string]any{"spec.pvcName": nil, "spec.group": group})); err != nil {
				t.Errorf("rejected: %v", err)
			}
		})
	}
	invalid := []struct {
		name    string
		edits   map[string]any
		field   string
		message string
	}{
		{"pvcName and group", map[string]any{"spec.group": names("db", "wal")}, "spec",
			"set exactly one of spec.pvcName (one PVC) and spec.group (several PVCs backed up together)"},
		{"neither pvcName nor group", map[string]any{"spec.pvcName": nil}, "spec",
			"set exactly one of spec.pvcName (one PVC) and spec.group (several PVCs backed up together)"},
		{"names and selector", map[string]any{"spec.pvcName": nil, "spec.group": map[string]any{"pvcNames": []any{"db", "wal"},
			"selector": selector["selector"]}}, "spec.group", "group must set exactly one of pvcNames and selector"},
		{"an empty group", map[string]any{"spec.pvcName": nil, "spec.group": map[string]any{}}, "spec.group",
			"group must set exactly one of pvcNames and selector"},
		{"an empty selector", map[string]any{"spec.pvcName": nil, "spec.group": map[string]any{"selector": map[string]any{}}}, "spec.group.selector",
			"group.selector must set matchLabels or matchExpressions"},
	}
	for _, tt := range invalid {
		t.Run("refuses "+tt.name, func(t *testing.T) {
			wantRejected(t, apply(manifest(t, backupManifest, ns, tt.edits)), tt.field, tt.message)
		})
	}
	// Schema errors (the API server then checks no CEL rule): each with its own message.
	schema := []struct {
		name    string
		group   map[string]any
		message string
	}{
		{"one name", names("db"), "spec.group.pvcNames: Invalid value: 1: spec.group.pvcNames in body should have at least 2 items"},
		{"seventeen names", names("a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "b0", "b1", "b2", "b3", "b4", "b5", "b6"),
			"spec.group.pvcNames: Too many: 17: must have at most 16 items"},
		{"a name twice", names("db", "db"), `spec.group.pvcNames[1]: Duplicate value: "db"`},
		{"not a PVC name", names("db", "WAL"), `spec.group.pvcNames[1]: Invalid value: "WAL"`},
	}
	for _, tt := range schema {
		t.Run("refuses "+tt.name, func(t *testing.T) {
			err := apply(manifest(t, backupManifest, ns, map[string]any{"spec.pvcName": nil, "spec.group": tt.group}))
			if err == nil || !strings.Contains(err.Error(), tt.message) {
				t.Errorf("want %q: %v", tt.message, err)
			}
		})
	}

	t.Run("refuses a switch between pvcName and group", func(t *testing.T) {
		u := manifest(t, backupManifest, ns, nil)
		if err := k8s.Create(testCtx, u); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(testCtx, u) })
		edited := manifest(t, backupManifest, ns, map[string]any{"spec.pvcName": nil, "spec.group": names("db", "wal")})
		edited.SetResourceVersion(u.GetResourceVersion())
		wantRejected(t, k8s.Update(testCtx, edited, client.DryRunAll), "spec",
			"a PVCBackup cannot switch between spec.pvcName and spec.group (its backups would mix both kinds): create a new PVCBackup")
	})
}

// spec.targets of a PVCRestore (a group backup's restore) is checked at admission: exactly one of
// target and targets, each target with exactly one of pvcName and newPVC, each member once, no
// paths. (Each PVC once is the controller's check: TestRestoreFormMustMatchTheBackup.)
func TestAdmissionChecksGroupRestores(t *testing.T) {
	ns := admissionNamespace(t)
	into := func(member, pvc string) map[string]any {
		return map[string]any{"sourcePVC": member, "newPVC": map[string]any{"name": pvc, "size": "1Gi"}}
	}
	existing := func(member, pvc string) map[string]any {
		return map[string]any{"sourcePVC": member, "pvcName": pvc, "overwrite": "Clean"}
	}
	t.Run("admits one target per member", func(t *testing.T) {
		edits := map[string]any{"spec.target": nil, "spec.targets": []any{into("db", "db-new"), existing("wal", "wal")}}
		if err := apply(manifest(t, restoreManifest, ns, edits)); err != nil {
			t.Errorf("rejected: %v", err)
		}
	})
	invalid := []struct {
		name    string
		edits   map[string]any
		field   string
		message string
	}{
		{"target and targets", map[string]any{"spec.targets": []any{into("db", "db-new")}}, "spec",
			"set exactly one of target (the backup of one PVC) and targets (a group backup: one target per member)"},
		{"neither target nor targets", map[string]any{"spec.target": nil}, "spec",
			"set exactly one of target (the backup of one PVC) and targets (a group backup: one target per member)"},
		{"a target with pvcName and newPVC", map[string]any{"spec.target": nil, "spec.targets": []any{
			map[string]any{"sourcePVC": "db", "pvcName": "db", "newPVC": map[string]any{"name": "db-new", "size": "1Gi"}}}},
			"spec.targets[0]", "each of targets sets exactly one of pvcName and newPVC"},
		{"paths with targets", map[string]any{"spec.target": nil, "spec.targets": []any{into("db", "db-new")}, "spec.paths": []any{"base"}},
			"spec", "paths cannot be combined with targets: a group backup is restored whole"},
	}
	for _, tt := range invalid {
		t.Run("refuses "+tt.name, func(t *testing.T) {
			wantRejected(t, apply(manifest(t, restoreManifest, ns, tt.edits)), tt.field, tt.message)
		})
	}
	t.Run("refuses a member twice", func(t *testing.T) {
		err := apply(manifest(t, restoreManifest, ns, map[string]any{"spec.target": nil, "spec.targets": []any{into("db", "a"), into("db", "b")}}))
		if err == nil || !strings.Contains(err.Error(), `spec.targets[1]: Duplicate value: {"sourcePVC":"db"}`) {
			t.Errorf("want a duplicate sourcePVC refused: %v", err)
		}
	})
}
