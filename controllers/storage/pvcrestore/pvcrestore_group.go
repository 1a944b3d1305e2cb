package pvcrestore

import (
	"fmt"
	"slices"
	"strings"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/archive"
)

// The restore of a group backup (spec.targets): one mover Job mounts every target at
// /data/<member> and restores each member's tree into its own (mover.EnvRestoreMembers). The
// backup must be a group backup of exactly the members spec.targets names, checked once when
// the backup is resolved (checkGroup): anything else fails before anything is touched.

// Reasons of the Complete condition (True, failed) when the backup and the restore's form differ.
const (
	// ReasonGroupBackup: spec.target names one volume, and the backup is of a group.
	ReasonGroupBackup = "GroupBackup"
	// ReasonNotAGroupBackup: spec.targets names members, and the backup is of one PVC.
	ReasonNotAGroupBackup = "NotAGroupBackup"
	// ReasonTargetsMismatch: spec.targets does not name exactly the members of the group backup.
	ReasonTargetsMismatch = "TargetsMismatch"
)

// target is one volume a restore writes: the member of a group backup it receives (source, ""
// for the backup of one PVC) and its spec.
type target struct {
	source string
	spec   storagev1.RestoreTarget
}

// targetsOf are the volumes pr restores into: spec.target, or one per spec.targets.
func targetsOf(pr *storagev1.PVCRestore) []target {
	if pr.Spec.Target != nil {
		return []target{{spec: *pr.Spec.Target}}
	}
	ts := make([]target, len(pr.Spec.Targets))
	for i, t := range pr.Spec.Targets {
		ts[i] = target{source: t.SourcePVC, spec: t.RestoreTarget}
	}
	return ts
}

// pvcName is the PVC the target writes: pvcName, or newPVC's name.
func (t target) pvcName() string {
	if t.spec.NewPVC != nil {
		return t.spec.NewPVC.Name
	}
	return t.spec.PVCName
}

// overwrite is the target's policy, Refuse when unset.
func (t target) overwrite() string {
	if t.spec.Overwrite == "" {
		return string(storagev1.OverwriteRefuse)
	}
	return string(t.spec.Overwrite)
}

// field is how messages name the target's place in the spec.
func (t target) field() string {
	if t.source == "" {
		return "target"
	}
	return fmt.Sprintf("targets[sourcePVC=%s]", t.source)
}

// checkGroup fails the restore (before anything is created or touched) when the backup m and
// the form of pr differ: a group backup needs spec.targets, one per member, and the backup of
// one PVC needs spec.target.
func (s *restoreScope) checkGroup(m archive.Manifest) error {
	pr, members := s.restore, m.Source.PVCs
	var sources []string
	for _, t := range pr.Spec.Targets {
		sources = append(sources, t.SourcePVC)
	}
	switch {
	case len(sources) == 0 && len(members) == 0:
		return nil
	case len(sources) == 0:
		return s.finish(storagev1.RestoreFailed, ReasonGroupBackup, fmt.Sprintf(
			"backup %s is a group backup of PVCs %s (PVCBackup spec.group): restore it with spec.targets, one target per member, instead of spec.target; nothing was restored",
			m.ID, strings.Join(members, ", ")))
	case len(members) == 0:
		return s.finish(storagev1.RestoreFailed, ReasonNotAGroupBackup, fmt.Sprintf(
			"backup %s is the backup of one PVC (%s), not of a group: restore it with spec.target instead of spec.targets; nothing was restored",
			m.ID, m.Source.PVC))
	}
	missing, unknown := difference(members, sources), difference(sources, members)
	if len(missing) == 0 && len(unknown) == 0 {
		return nil
	}
	var what []string
	if len(missing) > 0 {
		what = append(what, "no target for "+strings.Join(missing, ", "))
	}
	if len(unknown) > 0 {
		what = append(what, "targets for "+strings.Join(unknown, ", ")+", which the backup does not hold")
	}
	return s.finish(storagev1.RestoreFailed, ReasonTargetsMismatch, fmt.Sprintf(
		"backup %s is a group backup of PVCs %s; spec.targets has %s: name each member once as sourcePVC; nothing was restored",
		m.ID, strings.Join(members, ", "), strings.Join(what, " and ")))
}

// memberBytes is the file data of member in the group backup m, when its manifest recorded the
// backup's top level (archive backups: each member is a top-level directory).
func memberBytes(m archive.Manifest, member string) (int64, bool) {
	for _, e := range m.Tree {
		if e.Path == member {
			return e.Bytes, true
		}
	}
	return 0, false
}

// checkDistinctTargets fails the restore (InvalidSpec, before anything is created or touched)
// when two of spec.targets name the same PVC: two members would be restored into one volume.
// A CEL rule comparing every pair of targets would cost the API server too much (celcost_test).
func (s *restoreScope) checkDistinctTargets() error {
	seen := map[string]string{}
	for _, t := range targetsOf(s.restore) {
		if other, ok := seen[t.pvcName()]; ok {
			return s.finish(storagev1.RestoreFailed, storagekit.ReasonInvalidSpec, fmt.Sprintf(
				"targets[sourcePVC=%s] and targets[sourcePVC=%s] both restore into PersistentVolumeClaim %q: each member needs a PVC of its own; nothing was restored",
				other, t.source, t.pvcName()))
		}
		seen[t.pvcName()] = t.source
	}
	return nil
}

// difference is what of a is not in b, sorted.
func difference(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}

// restoreMembers is the value of mover.EnvRestoreMembers for pr: "<member>=<overwrite>,...";
// empty for the restore of one PVC.
func restoreMembers(pr *storagev1.PVCRestore) string {
	var items []string
	for _, t := range targetsOf(pr) {
		if t.source != "" {
			items = append(items, t.source+"="+t.overwrite())
		}
	}
	return strings.Join(items, ",")
}
