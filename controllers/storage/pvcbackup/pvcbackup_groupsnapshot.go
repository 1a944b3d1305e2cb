package pvcbackup

import (
	"context"
	"fmt"
	"time"

	groupsnapshotv1beta2 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1beta2"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
)

// A group chosen by a label selector, whose members are all volumes of one CSI driver that has a
// VolumeGroupSnapshotClass, is captured with one CSI VolumeGroupSnapshot (external-snapshotter,
// groupsnapshot.storage.k8s.io/v1beta2, the storage version of v8.6's CRDs): the driver cuts
// every member at the same instant, crash-consistent across the group. The snapshot-controller
// creates one VolumeSnapshot per member (owned by the VolumeGroupSnapshot, its
// spec.source.persistentVolumeClaimName the member); the run restores each into its temporary
// PVC (<run object name>-<i>) as it would its own snapshot. Otherwise (no selector, members of
// several drivers, no class, the API not served) the run takes one VolumeSnapshot per member
// (pvcbackup_snapshot.go). VolumeGroupSnapshots are read uncached (APIReader): the manager
// watches none.

// +kubebuilder:rbac:groups=groupsnapshot.storage.k8s.io,resources=volumegroupsnapshots,verbs=get;list;create;delete
// +kubebuilder:rbac:groups=groupsnapshot.storage.k8s.io,resources=volumegroupsnapshotclasses,verbs=list

// defaultGroupSnapshotClassAnnotation marks the VolumeGroupSnapshotClass of a driver used when
// the driver has several.
const defaultGroupSnapshotClassAnnotation = "groupsnapshot.storage.kubernetes.io/is-default-class"

// groupSnapshotClass is the VolumeGroupSnapshotClass the next run of pb captures its members
// with, or "" when it takes one VolumeSnapshot per member: pb must have spec.snapshot and a
// group selector, its members one CSI driver, and that driver one VolumeGroupSnapshotClass (or
// one marked default).
func (r *PVCBackupReconciler) groupSnapshotClass(ctx context.Context, pb *storagev1.PVCBackup, members []string) (string, error) {
	if pb.Spec.Snapshot == nil || pb.Spec.Group == nil || pb.Spec.Group.Selector == nil {
		return "", nil
	}
	driver := ""
	for _, pvc := range members {
		source, err := r.sourceClaim(ctx, pb.Namespace, pvc)
		if err != nil {
			return "", err
		}
		d, err := r.csiDriverOf(ctx, source)
		if err != nil || d == "" || (driver != "" && d != driver) {
			return "", err // a driver not known, or two drivers: no group snapshot
		}
		driver = d
	}
	classes := &groupsnapshotv1beta2.VolumeGroupSnapshotClassList{}
	if err := r.APIReader.List(ctx, classes); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return "", nil // the cluster does not serve group snapshots
		}
		return "", fmt.Errorf("list VolumeGroupSnapshotClasses: %w", err)
	}
	var ofDriver, defaults []string
	for _, c := range classes.Items {
		if c.Driver != driver {
			continue
		}
		ofDriver = append(ofDriver, c.Name)
		if c.Annotations[defaultGroupSnapshotClassAnnotation] == "true" {
			defaults = append(defaults, c.Name)
		}
	}
	switch {
	case len(defaults) == 1:
		return defaults[0], nil
	case len(ofDriver) == 1:
		return ofDriver[0], nil
	}
	return "", nil
}

// ensureGroupSnapshotClaims is ensureSourceClaims for a run with a VolumeGroupSnapshot: it creates
// the run's VolumeGroupSnapshot, and once it is ready restores each member's VolumeSnapshot into
// the member's temporary PVC; nil while anything is not ready. A group snapshot that failed, is
// not ready by the run's deadline, or holds no snapshot of a member ends the run (s.runFailure).
func (r *PVCBackupReconciler) ensureGroupSnapshotClaims(ctx context.Context, s *scope) ([]storagekit.MemberClaim, error) {
	pb, run := s.backup, s.backup.Status.ActiveRun
	vgs, err := r.groupSnapshot(ctx, pb, run)
	switch {
	case apierrors.IsNotFound(err):
		return nil, r.createGroupSnapshot(ctx, s)
	case err != nil:
		return nil, err
	}
	name := vgs.Name
	if st := vgs.Status; st != nil && st.Error != nil && st.Error.Message != nil {
		s.runFailure, s.runFailureReason = fmt.Sprintf("VolumeGroupSnapshot %s (class %s) failed: %s", name, run.VolumeGroupSnapshotClass, *st.Error.Message), ReasonSnapshotFailed
		return nil, nil
	}
	if vgs.Status == nil || !ptr.Deref(vgs.Status.ReadyToUse, false) {
		s.stage = ReasonSnapshotPending
		if deadline := runDeadline(pb, run); !s.now.Before(deadline) {
			s.runFailure, s.runFailureReason = fmt.Sprintf(
				"VolumeGroupSnapshot %s (class %s) was not ready to use %s after it was created, at the run's deadline "+
					"(spec.mover.activeDeadlineSeconds %d): is the snapshot-controller running with group snapshots on, and the CSI driver's csi-snapshotter? It is deleted with the run",
				name, run.VolumeGroupSnapshotClass, s.now.Sub(vgs.CreationTimestamp.Time).Round(time.Second), pb.Spec.Mover.Deadline()), ReasonSnapshotNotReady
		}
		return nil, nil
	}
	snaps, err := r.groupMemberSnapshots(ctx, vgs)
	if err != nil {
		return nil, err
	}
	claims := make([]storagekit.MemberClaim, len(run.PVCs))
	for i, pvc := range run.PVCs {
		vs, ok := snaps[pvc]
		switch {
		case !ok:
			s.runFailure, s.runFailureReason = fmt.Sprintf(
				"VolumeGroupSnapshot %s holds no snapshot of group member %s (its selector matched other PVCs when it was cut); the next run resolves the members again",
				name, pvc), ReasonSnapshotFailed
			return nil, nil
		case vs.Status == nil || !ptr.Deref(vs.Status.ReadyToUse, false):
			s.stage = ReasonSnapshotPending
			return nil, nil
		}
		claim := memberObjectName(pb, run, i)
		if err := r.ensureSnapshotClaim(ctx, s, pvc, claim, vs); err != nil {
			return nil, err
		}
		claims[i] = storagekit.MemberClaim{Dir: pvc, Claim: claim}
	}
	return claims, nil
}

// groupSnapshot reads the run's VolumeGroupSnapshot (named as the run's objects), uncached.
func (r *PVCBackupReconciler) groupSnapshot(ctx context.Context, pb *storagev1.PVCBackup, run *storagev1.ActiveRun) (*groupsnapshotv1beta2.VolumeGroupSnapshot, error) {
	vgs := &groupsnapshotv1beta2.VolumeGroupSnapshot{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: pb.Namespace, Name: storagekit.RunObjectName(pb, run)}, vgs)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("get VolumeGroupSnapshot: %w", err)
	}
	return vgs, err
}

// createGroupSnapshot creates the run's VolumeGroupSnapshot of spec.group.selector, owned by the
// PVCBackup and carrying the run (it may be the run's first object).
func (r *PVCBackupReconciler) createGroupSnapshot(ctx context.Context, s *scope) error {
	pb, run := s.backup, s.backup.Status.ActiveRun
	if err := r.ensureFresh(ctx, s); err != nil {
		return err
	}
	vgs := &groupsnapshotv1beta2.VolumeGroupSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: pb.Namespace, Name: storagekit.RunObjectName(pb, run),
			Labels: runLabels(pb, run), Annotations: storagekit.RunAnnotations(pb, run)},
		Spec: groupsnapshotv1beta2.VolumeGroupSnapshotSpec{
			Source:                       groupsnapshotv1beta2.VolumeGroupSnapshotSource{Selector: pb.Spec.Group.Selector.DeepCopy()},
			VolumeGroupSnapshotClassName: ptr.To(run.VolumeGroupSnapshotClass),
		},
	}
	if err := storagekit.CreateOnce(ctx, r.Client, pb, vgs); err != nil {
		return fmt.Errorf("create VolumeGroupSnapshot: %w", err)
	}
	s.stage = ReasonSnapshotPending
	return nil
}

// groupMemberSnapshots are the VolumeSnapshots the snapshot-controller made for vgs, by the PVC
// each is of.
func (r *PVCBackupReconciler) groupMemberSnapshots(ctx context.Context, vgs *groupsnapshotv1beta2.VolumeGroupSnapshot) (map[string]*snapshotv1.VolumeSnapshot, error) {
	list := &snapshotv1.VolumeSnapshotList{}
	if err := r.APIReader.List(ctx, list, client.InNamespace(vgs.Namespace)); err != nil {
		return nil, fmt.Errorf("list the VolumeSnapshots of VolumeGroupSnapshot %s: %w", vgs.Name, err)
	}
	snaps := map[string]*snapshotv1.VolumeSnapshot{}
	for i := range list.Items {
		vs := &list.Items[i]
		if !metav1.IsControlledBy(vs, vgs) && !ownedBy(vs, vgs) {
			continue
		}
		if pvc := ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, ""); pvc != "" {
			snaps[pvc] = vs
		}
	}
	return snaps, nil
}

// ownedBy tells whether vs has an owner reference to vgs (the snapshot-controller's is not a
// controller reference in every version).
func ownedBy(vs *snapshotv1.VolumeSnapshot, vgs *groupsnapshotv1beta2.VolumeGroupSnapshot) bool {
	for _, o := range vs.OwnerReferences {
		if o.UID == vgs.UID {
			return true
		}
	}
	return false
}

// groupSnapshotCut tells whether the run's VolumeGroupSnapshot has been cut (its creation time is
// set, or it is ready): every member's data is in it.
func (r *PVCBackupReconciler) groupSnapshotCut(ctx context.Context, s *scope) (bool, error) {
	vgs, err := r.groupSnapshot(ctx, s.backup, s.backup.Status.ActiveRun)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return vgs.Status != nil && (vgs.Status.CreationTime != nil || ptr.Deref(vgs.Status.ReadyToUse, false)), nil
}
