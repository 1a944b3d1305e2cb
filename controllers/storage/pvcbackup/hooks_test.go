package pvcbackup

import (
	"strings"
	"testing"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
)

// The hook results stay within the status' maxItems whatever the number of pods, failures first.
func TestBoundedResultsKeepsFailures(t *testing.T) {
	tests := []struct {
		name            string
		ok, failed      int
		wantOK, wantBad int
	}{
		{"under the bound", 10, 2, 10, 2},
		{"at the bound", 60, 4, 60, 4},
		{"over: successes dropped", 100, 3, maxHookResults - 3, 3},
		{"only failures over", 0, 70, 0, maxHookResults},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in []storagev1.HookResult
			for i := 0; i < tt.ok; i++ {
				in = append(in, storagev1.HookResult{Index: int32(i)})
			}
			for i := 0; i < tt.failed; i++ {
				in = append(in, storagev1.HookResult{Index: int32(i), Reason: ReasonHookFailed})
			}
			out := boundedResults(in)
			ok, bad := 0, 0
			for _, r := range out {
				if r.Reason == "" {
					ok++
				} else {
					bad++
				}
			}
			if ok != tt.wantOK || bad != tt.wantBad {
				t.Errorf("kept %d ok and %d failed, want %d and %d", ok, bad, tt.wantOK, tt.wantBad)
			}
		})
	}
}

// The tail keeps the end of the output, cut at a character boundary and marked.
func TestTailWriterKeepsTheEnd(t *testing.T) {
	w := &tailWriter{max: 8}
	_, _ = w.Write([]byte("short"))
	if w.String() != "short" {
		t.Errorf("%q", w.String())
	}
	_, _ = w.Write([]byte(" and then ünïcode end"))
	got := w.String()
	if !strings.HasPrefix(got, "[...]") || !strings.HasSuffix(got, "ode end") || strings.ContainsRune(got, '\uFFFD') {
		t.Errorf("%q", got)
	}
}
