package phase

import (
	"context"
	"errors"
	"testing"
)

func TestRunStopsAtTheFirstError(t *testing.T) {
	var ran []string
	step := func(name string, err error) Func[*[]string] {
		return func(_ context.Context, s *[]string) error { *s = append(*s, name); return err }
	}
	boom := errors.New("boom")
	if err := Run(context.Background(), &ran, step("a", nil), step("b", boom), step("c", nil)); err != boom {
		t.Errorf("Run = %v, want boom", err)
	}
	if len(ran) != 2 || ran[1] != "b" {
		t.Errorf("ran %v, want a, b", ran)
	}
}
