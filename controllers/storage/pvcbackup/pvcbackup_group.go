package pvcbackup

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/errclass"
)

// Groups of PVCs (spec.group). A group backup is one run over several PVCs: its members are
// resolved once, when the run is due (resolveMembers; a selector is evaluated then), recorded in
// status.activeRun.pvcs (and in the annotations of the run's first objects, for a run adopted
// from them), and from then on the run reads runMembers, never the spec: a PVC labelled during
// the run does not join it. With spec.snapshot every member gets its own VolumeSnapshot and
// temporary PVC, all created in the same step after the before-hooks; the after-hooks run once
// all are cut (snapshotCut). One mover Job mounts every member at /data/<pvc> and makes one
// backup of /data: one archive or kopia snapshot, one backup id, the members in its manifest.

const (
	// ReasonGroupEmpty (Ready False, polled): spec.group.selector matches no PVC.
	ReasonGroupEmpty = "GroupEmpty"
	// ReasonGroupTooLarge (Ready False, polled): spec.group.selector matches more PVCs than a
	// group holds (storagev1.MaxGroupMembers).
	ReasonGroupTooLarge = "GroupTooLarge"
)

// resolveMembers returns the PVCs the next run backs up, in name order, each there and not being
// deleted: spec.pvcName, spec.group.pvcNames, or what spec.group.selector matches now. Anything
// missing is a Waiting condition naming it, polled.
func (r *PVCBackupReconciler) resolveMembers(ctx context.Context, pb *storagev1.PVCBackup) ([]string, error) {
	g := pb.Spec.Group
	switch {
	case g == nil:
		return []string{pb.Spec.PVCName}, r.checkClaim(ctx, pb, pb.Spec.PVCName, "")
	case g.Selector != nil:
		return r.selectMembers(ctx, pb)
	}
	names := append([]string(nil), g.PVCNames...)
	sort.Strings(names)
	for _, name := range names {
		if err := r.checkClaim(ctx, pb, name, " (a member of spec.group.pvcNames)"); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// checkClaim is nil when PVC name exists and is not being deleted; role says, in messages, why
// the PVCBackup needs it.
func (r *PVCBackupReconciler) checkClaim(ctx context.Context, pb *storagev1.PVCBackup, name, role string) error {
	pvc := storagekit.ClaimMetadata()
	err := r.Get(ctx, client.ObjectKey{Namespace: pb.Namespace, Name: name}, pvc)
	switch {
	case apierrors.IsNotFound(err):
		return errclass.Waiting(ReasonPVCNotFound, fmt.Sprintf("PersistentVolumeClaim %q%s does not exist", name, role), r.Poll())
	case err != nil:
		return fmt.Errorf("get PVC %s: %w", name, err)
	case !pvc.DeletionTimestamp.IsZero():
		return errclass.Waiting(ReasonPVCNotFound, fmt.Sprintf("PersistentVolumeClaim %q%s is being deleted", name, role), r.Poll())
	}
	return nil
}

// selectMembers evaluates spec.group.selector over the PVCs of the namespace (the cache's
// metadata). PVCs being deleted, and the temporary PVCs of backup runs, are never members.
func (r *PVCBackupReconciler) selectMembers(ctx context.Context, pb *storagev1.PVCBackup) ([]string, error) {
	sel, err := metav1.LabelSelectorAsSelector(pb.Spec.Group.Selector)
	if err != nil {
		return nil, errclass.Stalled(storagekit.ReasonInvalidSpec, fmt.Sprintf("spec.group.selector is not a valid label selector: %v", err))
	}
	list := storagekit.ClaimMetadataList()
	if err := r.List(ctx, list, client.InNamespace(pb.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("list PVCs of spec.group.selector: %w", err)
	}
	var names []string
	for _, pvc := range list.Items {
		if _, temporary := pvc.Labels[storagekit.LabelBackup]; temporary || !pvc.DeletionTimestamp.IsZero() {
			continue
		}
		names = append(names, pvc.Name)
	}
	sort.Strings(names)
	switch {
	case len(names) == 0:
		return nil, errclass.Waiting(ReasonGroupEmpty, fmt.Sprintf(
			"spec.group.selector %q matches no PersistentVolumeClaim of namespace %s: label the PVCs to back up, or fix the selector",
			sel.String(), pb.Namespace), r.Poll())
	case len(names) > storagev1.MaxGroupMembers:
		return nil, errclass.Waiting(ReasonGroupTooLarge, fmt.Sprintf(
			"spec.group.selector %q matches %d PersistentVolumeClaims (%s, ...); a group holds at most %d: narrow the selector or split the group",
			sel.String(), len(names), strings.Join(names[:3], ", "), storagev1.MaxGroupMembers), r.Poll())
	}
	return names, nil
}

// runMembers are the PVCs the active run backs up: those recorded when it started for a group,
// spec.pvcName otherwise.
func runMembers(pb *storagev1.PVCBackup, run *storagev1.ActiveRun) []string {
	if len(run.PVCs) > 0 {
		return run.PVCs
	}
	return []string{pb.Spec.PVCName}
}

// memberObjectName is the name of the VolumeSnapshot and temporary PVC of the run's member i:
// the run's object name for the backup of one PVC, with "-<i>" for a group's.
func memberObjectName(pb *storagev1.PVCBackup, run *storagev1.ActiveRun, i int) string {
	name := storagekit.RunObjectName(pb, run)
	if len(run.PVCs) == 0 {
		return name
	}
	return name + "-" + strconv.Itoa(i)
}
