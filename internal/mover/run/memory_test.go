package run

import (
	"math"
	"runtime/debug"
	"testing"

	. "github.com/okgoes/okgoes-operator/internal/mover"
)

func TestMemoryLimitFollowsTheContainerLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	cases := []struct {
		env  env
		want int64 // the runtime's limit afterwards; MaxInt64 is "none"
	}{
		{env{EnvMemoryLimit: "1073741824"}, 805306368},
		{env{EnvMemoryLimit: "1073741824", "GOMEMLIMIT": "100MiB"}, math.MaxInt64}, // the user's setting wins
		{env{EnvMemoryLimit: ""}, math.MaxInt64},
		{env{EnvMemoryLimit: "lots"}, math.MaxInt64},
	}
	for _, c := range cases {
		debug.SetMemoryLimit(math.MaxInt64)
		SetMemoryLimit(c.env.get)
		if got := debug.SetMemoryLimit(-1); got != c.want {
			t.Errorf("%v: memory limit %d, want %d", c.env, got, c.want)
		}
	}
}

func TestGCPercentIsTheMoversUnlessGOGCIsSet(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, c := range []struct {
		env  env
		want int
	}{
		{env{}, gcPercent},
		{env{"GOGC": "200"}, 100}, // the user's setting wins: the runtime read it at start (100 here)
	} {
		debug.SetGCPercent(100)
		SetGCPercent(c.env.get)
		if got := debug.SetGCPercent(100); got != c.want {
			t.Errorf("%v: GOGC %d, want %d", c.env, got, c.want)
		}
	}
}
