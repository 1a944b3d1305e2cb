package kopiarepo

import (
	"slices"
	"testing"
)

// The objects of a pack are read one directory after another in turn, so that the parallel
// readers create files in different directories; every object is read once.
func TestPackObjectsAlternateDirectories(t *testing.T) {
	dirsOf := func(objs []planned) []int32 {
		var d []int32
		for _, o := range objs {
			d = append(d, o.dir)
		}
		return d
	}
	for _, c := range []struct{ in, want []int32 }{
		{[]int32{0, 0, 0, 1, 1, 2}, []int32{0, 1, 2, 0, 1, 0}},
		{[]int32{3, 3, 3}, []int32{3, 3, 3}},
		{[]int32{5, 1, 5, 1, 1}, []int32{5, 1, 5, 1, 1}},
		{nil, nil},
	} {
		objs := make([]planned, 0, len(c.in)+3) // spare capacity, as append leaves it
		for _, d := range c.in {
			objs = append(objs, planned{dir: d})
		}
		if got := dirsOf(acrossDirectories(objs)); !slices.Equal(got, c.want) {
			t.Errorf("directories %v read as %v, want %v", c.in, got, c.want)
		}
	}
}
