package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/okgoes/okgoes-operator/internal/mover"
)

// The target of a restore is one volume (RestoreJob.TargetDir), or, for a group backup, one
// volume per member mounted at TargetDir/<member> (RestoreJob.Members): each is a volume root
// with its own overwrite policy, and TargetDir itself is only the directory the mounts are in.

// volume is one target volume of a restore: its directory and overwrite policy.
type volume struct {
	dir, name, overwrite string
}

// volumes are the target volumes of job.
func volumes(job RestoreJob) []volume {
	if len(job.Members) == 0 {
		return []volume{{job.TargetDir, "", job.Overwrite}}
	}
	v := make([]volume, len(job.Members))
	for i, m := range job.Members {
		v[i] = volume{filepath.Join(job.TargetDir, m.Dir), m.Dir, m.Overwrite}
	}
	return v
}

// OverwriteOf is the policy that says what a failed restore of job may have done to its
// targets: job.Overwrite, or for a group Clean when any member is cleaned, else Merge when any
// is merged.
func OverwriteOf(job RestoreJob) string {
	if len(job.Members) == 0 {
		return job.Overwrite
	}
	policy := "Refuse"
	for _, m := range job.Members {
		if m.Overwrite == "Clean" || (m.Overwrite == "Merge" && policy != "Clean") {
			policy = m.Overwrite
		}
	}
	return policy
}

// VolumeRoots are the directories, relative to TargetDir, that are volume roots besides
// TargetDir itself: those of a group's members. A restricted mover may not own them (fsGroup);
// they keep their owner, and a refused mode or time is ignored, as for TargetDir.
func VolumeRoots(job RestoreJob) []string {
	roots := make([]string, len(job.Members))
	for i, m := range job.Members {
		roots[i] = m.Dir
	}
	return roots
}

// CheckMembers proves, before anything is written, that job restores the backup of the group
// pvcs (its manifest's source.pvcs) member for member, each into a mounted directory: a group
// backup restored as one volume, a single backup restored as a group, or a member without its
// target would otherwise leave volumes empty or mixed.
func CheckMembers(job RestoreJob, id string, pvcs []string) error {
	dirs := VolumeRoots(job)
	switch {
	case len(pvcs) == 0 && len(dirs) == 0:
		return nil
	case len(dirs) == 0:
		return mover.Fail(mover.ReasonInvalidConfig, "backup %s is a group backup of %s: it is restored by a group restore (%s), one target per member",
			id, strings.Join(pvcs, ", "), mover.EnvRestoreMembers)
	case len(pvcs) == 0:
		return mover.Fail(mover.ReasonInvalidConfig, "backup %s is the backup of one PVC, not of a group: it is restored without %s", id, mover.EnvRestoreMembers)
	}
	want, got := slices.Sorted(slices.Values(pvcs)), slices.Sorted(slices.Values(dirs))
	if !slices.Equal(want, got) {
		return mover.Fail(mover.ReasonInvalidConfig, "backup %s is a group backup of %s; the restore has targets for %s: one target per member, no other",
			id, strings.Join(want, ", "), strings.Join(got, ", "))
	}
	for _, v := range volumes(job) {
		if fi, err := os.Stat(v.dir); err != nil || !fi.IsDir() {
			return mover.Fail(mover.ReasonTargetNotWritable, "the target volume of group member %s is not mounted at %s (%v)", v.name, v.dir, err)
		}
	}
	return nil
}

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

// CleansData tells whether the restore job empties a target volume that holds data (a volume
// with overwrite Clean that is not empty): what must not happen before the backup is proved
// readable in full.
func CleansData(job RestoreJob) (bool, error) {
	for _, v := range volumes(job) {
		if v.overwrite != "Clean" {
			continue
		}
		names, err := TargetData(v.dir)
		if err != nil || len(names) > 0 {
			return err == nil, err
		}
	}
	return false, nil
}

// PrepareTarget applies the overwrite policy (Refuse, Clean or Merge) to each target volume of
// a restore (every member's, for a group): Refuse refuses a volume with data before any volume
// is touched. An engine calls it only once the backup proved readable. lost+found (made by
// mkfs) does not count as data.
func PrepareTarget(job RestoreJob) error {
	vols := volumes(job)
	data := make([][]string, len(vols))
	for i, v := range vols { // every refusal first: nothing is cleaned for a restore that is refused
		names, err := TargetData(v.dir)
		if err != nil {
			return err
		}
		data[i] = names
		if len(names) > 0 && v.overwrite != "Merge" && v.overwrite != "Clean" {
			return refused(v, names)
		}
	}
	for i, v := range vols {
		if v.overwrite != "Clean" {
			continue
		}
		for _, n := range data[i] {
			if err := os.RemoveAll(filepath.Join(v.dir, n)); err != nil {
				return mover.Fail(mover.ReasonTargetNotWritable, "clean target%s: %w (the target volume is partly emptied)", of(v), err)
			}
		}
	}
	return nil
}

// refused is the failure of a Refuse restore into volume v, which holds names.
func refused(v volume, names []string) error {
	shown := names[:min(len(names), 3)]
	more := ""
	if len(names) > 3 {
		more = ", ..."
	}
	field := "target.overwrite"
	if v.name != "" {
		field = "its overwrite in targets"
	}
	return mover.Fail(mover.ReasonTargetNotEmpty, "the target volume%s is not empty (%s%s); set %s to Clean or Merge",
		of(v), strings.Join(shown, ", "), more, field)
}

// of names, in messages, the group member a target volume is of.
func of(v volume) string {
	if v.name == "" {
		return ""
	}
	return " of group member " + v.name
}
