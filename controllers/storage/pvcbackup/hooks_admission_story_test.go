package pvcbackup

import (
	"strings"
	"testing"
)

// spec.hooks is checked at admission, each mistake with its own message, every other rule still
// checked (wantRejected).
func TestAdmissionChecksHooks(t *testing.T) {
	ns := admissionNamespace(t)
	hook := func(edit func(map[string]any)) map[string]any {
		h := map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "db"}},
			"command": []any{"fsfreeze", "--freeze", "/data"}}
		if edit != nil {
			edit(h)
		}
		return map[string]any{"before": []any{h}}
	}
	valid := map[string]map[string]any{
		"minimal":     hook(nil),
		"every field": hook(func(h map[string]any) { h["container"], h["timeout"], h["onError"] = "app", "2m", "Continue" }),
		"match expression": hook(func(h map[string]any) {
			h["selector"] = map[string]any{"matchExpressions": []any{map[string]any{"key": "app", "operator": "Exists"}}}
		}),
		"after only": {"after": []any{hook(nil)["before"].([]any)[0]}},
	}
	for name, hooks := range valid {
		t.Run("admits "+name, func(t *testing.T) {
			if err := apply(manifest(t, backupManifest, ns, map[string]any{"spec.hooks": hooks})); err != nil {
				t.Errorf("rejected: %v", err)
			}
		})
	}
	invalid := []struct {
		name    string
		hooks   map[string]any
		field   string
		message string
	}{
		{"no hook at all", map[string]any{"before": []any{}}, "spec.hooks", "hooks must list at least one before or after hook"},
		{"empty selector", hook(func(h map[string]any) { h["selector"] = map[string]any{} }),
			"spec.hooks.before[0].selector", "selector must set matchLabels or matchExpressions: an empty selector would pick every pod of the namespace"},
		{"empty program", hook(func(h map[string]any) { h["command"] = []any{"", "x"} }),
			"spec.hooks.before[0].command", "command[0] must name the program to run"},
		{"timeout too long", hook(func(h map[string]any) { h["timeout"] = "11m" }),
			"spec.hooks.before[0].timeout", "timeout must be a duration from 1s to 10m"},
		{"timeout too short", hook(func(h map[string]any) { h["timeout"] = "500ms" }),
			"spec.hooks.before[0].timeout", "timeout must be a duration from 1s to 10m"},
		{"timeout not a duration", hook(func(h map[string]any) { h["timeout"] = "soon" }),
			"spec.hooks.before[0].timeout", "timeout must be a duration from 1s to 10m"},
		{"unknown onError", hook(func(h map[string]any) { h["onError"] = "Ignore" }),
			"spec.hooks.before[0].onError", "onError must be Fail or Continue"},
		{"nine before-hooks", map[string]any{"before": []any{hook(nil)["before"].([]any)[0], hook(nil)["before"].([]any)[0], hook(nil)["before"].([]any)[0],
			hook(nil)["before"].([]any)[0], hook(nil)["before"].([]any)[0], hook(nil)["before"].([]any)[0], hook(nil)["before"].([]any)[0],
			hook(nil)["before"].([]any)[0], hook(nil)["before"].([]any)[0]}}, "spec.hooks.before", "must have at most 8 items"},
	}
	for _, tt := range invalid {
		t.Run("refuses "+tt.name, func(t *testing.T) {
			err := apply(manifest(t, backupManifest, ns, map[string]any{"spec.hooks": tt.hooks}))
			if tt.name == "nine before-hooks" { // a MaxItems error: the API server checks no CEL rule then
				if err == nil || !strings.Contains(err.Error(), tt.message) {
					t.Errorf("want %q: %v", tt.message, err)
				}
				return
			}
			wantRejected(t, err, tt.field, tt.message)
		})
	}
}
