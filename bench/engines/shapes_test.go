package main

import (
	"slices"
	"testing"
)

// Every shape must be the same tree each time it is generated (the rounds compare like with
// like) and its change must change it (a second backup with nothing new to store measures
// nothing).
func TestShapesAreDeterministicAndTheirChangeChangesThem(t *testing.T) {
	for _, d := range datasets(0.001) {
		if d.make == nil && d.change == nil && d.sizeOf == nil {
			continue // issue 12's trees: verify_test.go
		}
		t.Run(d.name, func(t *testing.T) {
			a, b := t.TempDir(), t.TempDir()
			if err := d.generate(a); err != nil {
				t.Fatal(err)
			}
			if err := d.generate(b); err != nil {
				t.Fatal(err)
			}
			if err := sameTree(a, b); err != nil {
				t.Fatalf("two generations differ: %v", err)
			}
			files, _, err := treeSize(a)
			if err != nil || files == 0 {
				t.Fatalf("%d files (%v)", files, err)
			}
			n, err := d.rewrite(b)
			if err != nil || n == 0 {
				t.Fatalf("change: %d changed (%v)", n, err)
			}
			if err := sameTree(a, b); err == nil {
				t.Fatal("the change left the tree as it was")
			}
		})
	}
}

func TestRotateGivesEveryToolEachPlace(t *testing.T) {
	tools := []string{"a", "b", "c"}
	firsts := map[string]bool{}
	for r := range 3 {
		got := rotate(tools, r)
		if len(got) != 3 {
			t.Fatalf("round %d: %v", r, got)
		}
		firsts[got[0]] = true
	}
	if len(firsts) != 3 || !slices.Equal(tools, []string{"a", "b", "c"}) {
		t.Fatalf("first places %v, tools %v", firsts, tools)
	}
}
