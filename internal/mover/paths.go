package mover

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// EnvRestorePaths (PVCRestore spec.paths) restores only these files or directories of the
// backup: a JSON array of strings, each relative to the volume's root as it is in the backup
// ("app/config", "db/pg_hba.conf"). JSON, not a separated list, because a file name may hold
// any byte but NUL and "/" (newlines and commas included), and JSON escapes every one of them.
// Unset or empty: the whole backup.
const EnvRestorePaths = "RESTORE_PATHS"

// MaxRestorePaths is the most paths a restore takes (the CRD's maxItems).
const MaxRestorePaths = 20

// EncodePaths is the value of EnvRestorePaths for paths ("" for none).
func EncodePaths(paths []string) string {
	if len(paths) == 0 {
		return ""
	}
	b, _ := json.Marshal(paths) //nolint:errchkjson // a []string always encodes
	return string(b)
}

// DecodePaths reads EnvRestorePaths: the paths, checked as admission checks them (CheckPath),
// sorted, with every path under another one of the list dropped (the other restores it).
// nil for an empty value: the whole backup.
func DecodePaths(value string) ([]string, error) {
	if strings.TrimSpace(value) == "" {
		return nil, nil
	}
	var paths []string
	if err := json.Unmarshal([]byte(value), &paths); err != nil {
		return nil, fmt.Errorf("%s is not a JSON array of strings: %w", EnvRestorePaths, err)
	}
	if len(paths) > MaxRestorePaths {
		return nil, fmt.Errorf("%s names %d paths, at most %d are allowed", EnvRestorePaths, len(paths), MaxRestorePaths)
	}
	for _, p := range paths {
		if err := CheckPath(p); err != nil {
			return nil, err
		}
	}
	return Outermost(paths), nil
}

// CheckPath refuses what PVCRestore admission refuses in a path: empty, absolute, an empty, "."
// or ".." component.
func CheckPath(p string) error {
	if p == "" {
		return fmt.Errorf("an empty path")
	}
	if strings.HasPrefix(p, "/") {
		return fmt.Errorf("path %q is absolute: paths are relative to the volume's root", p)
	}
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".", "..":
			return fmt.Errorf("path %q has a component %q: name the file or directory as it is under the volume's root", p, c)
		}
	}
	return nil
}

// Outermost sorts paths and drops duplicates and every path below another one of the list.
func Outermost(paths []string) []string {
	sorted := append([]string(nil), paths...)
	sort.Strings(sorted)
	var out []string
next:
	for _, p := range sorted {
		for _, o := range out { // at most MaxRestorePaths; "a-b" sorts between "a" and "a/b"
			if Covers(o, p) {
				continue next
			}
		}
		out = append(out, p)
	}
	return out
}

// Covers reports whether name (slash-separated, relative to the volume's root) is the path p or
// lies under it.
func Covers(p, name string) bool {
	return name == p || (strings.HasPrefix(name, p) && name[len(p)] == '/')
}
