package mover

import (
	"slices"
	"strings"
	"testing"
)

// RESTORE_PATHS survives any file name (JSON), is checked as admission checks it, and keeps only
// the outermost of nested paths ("a-b" sorts between "a" and "a/b").
func TestRestorePathsEncodingAndRules(t *testing.T) {
	odd := []string{"new\nline", "comma,semi;colon", `quote"back\slash`, "ünïcode/ tab\t", "a", "a-b", "a/b", "a/b/c", "a"}
	got, err := DecodePaths(EncodePaths(odd))
	if want := []string{"a", "a-b", "comma,semi;colon", "new\nline", `quote"back\slash`, "ünïcode/ tab\t"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("DecodePaths(EncodePaths(%q)) = %q, %v; want %q", odd, got, err, want)
	}
	if got, err := DecodePaths(""); got != nil || err != nil || EncodePaths(nil) != "" {
		t.Errorf("no paths: %q, %v, %q", got, err, EncodePaths(nil))
	}
	for _, bad := range []string{`["/etc"]`, `["a/../b"]`, `[".."]`, `["./a"]`, `["a//b"]`, `["a/"]`, `[""]`, `"a"`, `[1]`,
		`[` + strings.Repeat(`"x",`, MaxRestorePaths) + `"x"]`} {
		if _, err := DecodePaths(bad); err == nil {
			t.Errorf("DecodePaths(%.40s) took it", bad)
		}
	}
}
