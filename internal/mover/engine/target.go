package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/okgoes/okgoes-operator/internal/mover"
)

// TargetState tells the user what a failed restore left in the target volume: prepared says
// whether PrepareTarget ran (and may have changed it).
func TargetState(prepared bool, overwrite string) string {
	switch {
	case !prepared:
		return "the target volume was not changed"
	case overwrite == "Clean":
		return "the target volume was emptied (overwrite: Clean) and holds a partial restore"
	case overwrite == "Merge":
		return "the target volume holds its earlier files and a partial restore"
	default:
		return "the target volume holds a partial restore"
	}
}

// RestoreFailed is err of a restore, its Reason kept (StorageFailed when it has none), with what
// the restore left in the target (TargetState).
func RestoreFailed(err error, prepared bool, overwrite string) error {
	return &mover.Error{Reason: mover.ReasonOf(err, mover.ReasonStorageFailed),
		Err: fmt.Errorf("%w; %s", err, TargetState(prepared, overwrite))}
}

// TargetRefused is the failure of a restore whose target refused a write (archive.IsTargetError).
func TargetRefused(err error) error {
	return mover.Fail(mover.ReasonTargetNotWritable, "the target refused a write (%v): the mover runs as uid %d and needs a writable volume with room for the backup",
		err, os.Getuid())
}

// TargetData lists the entries of the target volume that are data: lost+found (made by mkfs)
// is not.
func TargetData(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, mover.Fail(mover.ReasonTargetNotWritable, "target: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != "lost+found" {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// PrepareTarget applies the overwrite policy (Refuse, Clean or Merge) to the target dir of a
// restore. An engine calls it only once the backup proved readable. lost+found (made by mkfs)
// does not count as data.
func PrepareTarget(dir, policy string) error {
	names, err := TargetData(dir)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return nil
	}
	switch policy {
	case "Merge":
		return nil
	case "Clean":
		for _, n := range names {
			if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
				return mover.Fail(mover.ReasonTargetNotWritable, "clean target: %w (the target volume is partly emptied)", err)
			}
		}
		return nil
	default:
		shown := names[:min(len(names), 3)]
		more := ""
		if len(names) > 3 {
			more = ", ..."
		}
		return mover.Fail(mover.ReasonTargetNotEmpty, "the target volume is not empty (%s%s); set target.overwrite to Clean or Merge",
			strings.Join(shown, ", "), more)
	}
}
