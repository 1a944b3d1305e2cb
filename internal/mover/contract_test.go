package mover

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// The manager imports this package (through controllers/storage) and must link no engine: the
// kopia packages alone were 75 packages of the manager's binary that it never ran.
func TestTheManagerLinksNoEngine(t *testing.T) {
	for _, pkg := range []string{".", "../.."} { // the contract, and the manager (main.go)
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "github.com/kopia/kopia") || strings.Contains(dep, "/internal/kopiarepo") ||
				strings.Contains(dep, "/internal/mover/") {
				t.Errorf("%s links %s", pkg, dep)
			}
		}
	}
}

// An engine's error keeps its Reason through wrapping; an error without one gets the default.
func TestReasonOf(t *testing.T) {
	stalled := Fail(ReasonStorageStalled, "upload %s: %w", "k", errors.New("frozen"))
	for _, tt := range []struct {
		err  error
		want Reason
	}{
		{stalled, ReasonStorageStalled},
		{fmt.Errorf("restore: %w", stalled), ReasonStorageStalled},
		{errors.New("plain"), ReasonStorageFailed},
	} {
		if got := ReasonOf(tt.err, ReasonStorageFailed); got != tt.want {
			t.Errorf("ReasonOf(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
	if stalled.Error() != "upload k: frozen" {
		t.Errorf("the message of a Fail is %q", stalled.Error())
	}
}
