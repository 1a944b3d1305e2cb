package pvcbackup

import (
	"context"
	"fmt"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
)

// snapshotReadyBound is how long a VolumeSnapshot may stay not-ready before the run's status says
// so loudly (the run keeps waiting, until its deadline: some drivers take long for big volumes).
const snapshotReadyBound = 10 * time.Minute

const (
	// ReasonSnapshotFailed (lastRun.reason): the VolumeSnapshot reported an error.
	ReasonSnapshotFailed = "SnapshotFailed"
	// ReasonSnapshotNotReady (lastRun.reason): the VolumeSnapshot was not ready to use by the
	// run's deadline (spec.mover.activeDeadlineSeconds, counted from the run's start).
	ReasonSnapshotNotReady = "SnapshotNotReady"
)

// ensureSourceClaims returns the claims the mover reads, one per member of the run
// (runMembers): the PVCs themselves, or — with spec.snapshot — temporary PVCs restored from a
// VolumeSnapshot of each, once every snapshot is ready. The snapshots of a group are all created
// in the same step (one reconcile), right after the before-hooks; nil while any is not ready.
func (r *PVCBackupReconciler) ensureSourceClaims(ctx context.Context, s *scope) ([]storagekit.MemberClaim, error) {
	pb, run := s.backup, s.backup.Status.ActiveRun
	members := runMembers(pb, run)
	if pb.Spec.Snapshot == nil {
		return directClaims(members), nil
	}
	if !r.snapshotsServed(ctx) {
		// The API went away during the run (checkDependencies found it before the start): the
		// run ends, and the next reconcile says SnapshotsUnsupported, never next to Uploading.
		s.runFailure, s.runFailureReason = snapshotsUnsupported(r.Poll()), ReasonSnapshotsUnsupported
		return nil, nil
	}
	if run.VolumeGroupSnapshotClass != "" {
		return r.ensureGroupSnapshotClaims(ctx, s)
	}
	snaps := make([]*snapshotv1.VolumeSnapshot, len(members))
	ready := true
	for i, pvc := range members {
		vs, ok, err := r.ensureSnapshot(ctx, s, pvc, memberObjectName(pb, run, i))
		if err != nil || s.runFailure != "" {
			return nil, err
		}
		snaps[i], ready = vs, ready && ok
	}
	if !ready {
		return nil, nil
	}
	claims := make([]storagekit.MemberClaim, len(members))
	for i, pvc := range members {
		if err := r.ensureSnapshotClaim(ctx, s, pvc, snaps[i].Name, snaps[i]); err != nil {
			return nil, err
		}
		claims[i] = storagekit.MemberClaim{Dir: pvc, Claim: snaps[i].Name}
	}
	return claims, nil
}

// directClaims are the claims of a run without snapshots: the members themselves.
func directClaims(members []string) []storagekit.MemberClaim {
	claims := make([]storagekit.MemberClaim, len(members))
	for i, pvc := range members {
		claims[i] = storagekit.MemberClaim{Dir: pvc, Claim: pvc}
	}
	return claims
}

// ensureSnapshot creates the run's VolumeSnapshot name of pvc when it is missing, and tells
// whether it is ready to use. A snapshot that failed, or is not ready at the run's deadline,
// ends the run (s.runFailure).
func (r *PVCBackupReconciler) ensureSnapshot(ctx context.Context, s *scope, pvc, name string) (*snapshotv1.VolumeSnapshot, bool, error) {
	pb, run := s.backup, s.backup.Status.ActiveRun
	vs := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: pb.Namespace, Name: name}}
	if err := r.Get(ctx, client.ObjectKeyFromObject(vs), vs); apierrors.IsNotFound(err) {
		if err := r.ensureFresh(ctx, s); err != nil {
			return nil, false, err
		}
		class := s.snapshotClasses[pvc]
		if class == "" { // the run started in an earlier reconcile, whose Create failed
			source, err := r.sourceClaim(ctx, pb.Namespace, pvc)
			if err != nil {
				return nil, false, err
			}
			if class, err = r.resolveSnapshotClass(ctx, s, source); err != nil {
				return nil, false, err
			}
		}
		vs.Labels, vs.Annotations = runLabels(pb, run), storagekit.RunAnnotations(pb, run)
		vs.Spec = snapshotv1.VolumeSnapshotSpec{
			Source:                  snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To(pvc)},
			VolumeSnapshotClassName: ptr.To(class),
		}
		if err := storagekit.CreateOnce(ctx, r.Client, pb, vs); err != nil {
			return nil, false, fmt.Errorf("create VolumeSnapshot: %w", err)
		}
		s.stage = ReasonSnapshotPending
		return vs, false, nil
	} else if err != nil {
		return nil, false, fmt.Errorf("get VolumeSnapshot: %w", err)
	}
	if st := vs.Status; st != nil && st.Error != nil && st.Error.Message != nil {
		s.runFailure, s.runFailureReason = fmt.Sprintf("VolumeSnapshot %s%s failed: %s", name, ofMember(run, pvc), *st.Error.Message), ReasonSnapshotFailed
		return vs, false, nil
	}
	if vs.Status == nil || !ptr.Deref(vs.Status.ReadyToUse, false) {
		s.stage = ReasonSnapshotPending
		class := ptr.Deref(vs.Spec.VolumeSnapshotClassName, "")
		age := s.now.Sub(vs.CreationTimestamp.Time).Round(time.Second)
		if deadline := runDeadline(pb, run); !s.now.Before(deadline) {
			s.runFailure, s.runFailureReason = fmt.Sprintf(
				"VolumeSnapshot %s%s (class %q) was not ready to use %s after it was created, at the run's deadline "+
					"(spec.mover.activeDeadlineSeconds %d): %s; it is deleted with the run",
				name, ofMember(run, pvc), class, age, pb.Spec.Mover.Deadline(), snapshotProgress(vs)), ReasonSnapshotNotReady
			return vs, false, nil
		}
		if age > snapshotReadyBound {
			s.stageMessage = fmt.Sprintf("VolumeSnapshot %s%s is not ready after %s (%s); check the CSI driver and snapshot class %q",
				name, ofMember(run, pvc), age, snapshotProgress(vs), class)
		}
		s.requeue = min(s.requeue, max(time.Second, runDeadline(pb, run).Sub(s.now)))
		return vs, false, nil
	}
	return vs, true, nil
}

// ofMember names, in messages about a group's snapshot, the member it is of.
func ofMember(run *storagev1.ActiveRun, pvc string) string {
	if len(run.PVCs) == 0 {
		return ""
	}
	return fmt.Sprintf(" (of group member %s)", pvc)
}

// ensureSnapshotClaim creates the temporary PVC name restored from the ready snapshot vs of pvc
// when it is missing.
func (r *PVCBackupReconciler) ensureSnapshotClaim(ctx context.Context, s *scope, pvc, name string, vs *snapshotv1.VolumeSnapshot) error {
	pb, run := s.backup, s.backup.Status.ActiveRun
	if err := r.Get(ctx, client.ObjectKey{Namespace: pb.Namespace, Name: name}, storagekit.ClaimMetadata()); apierrors.IsNotFound(err) {
		if err := r.ensureFresh(ctx, s); err != nil {
			return err
		}
		source, err := r.sourceClaim(ctx, pb.Namespace, pvc)
		if err != nil {
			return err
		}
		tmp := desiredSnapshotClaim(pb, run, name, source, vs)
		if err := storagekit.CreateOnce(ctx, r.Client, pb, tmp); err != nil {
			return fmt.Errorf("create PVC from snapshot: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("get PVC from snapshot: %w", err)
	}
	return nil
}

// sourceClaim reads PVC name of namespace, uncached: the cache holds the metadata of PVCs only
// (ClaimMetadata), and their spec is needed only to pick a snapshot class and to size the PVC
// restored from a snapshot, once per run.
func (r *PVCBackupReconciler) sourceClaim(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	source := &corev1.PersistentVolumeClaim{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, source); err != nil {
		return nil, fmt.Errorf("get source PVC %s: %w", name, err)
	}
	return source, nil
}

// snapshotProgress says how far the snapshot got: with no VolumeSnapshotContent bound, the
// snapshot controller has not acted on it; with one but no creation time, the CSI driver (its
// csi-snapshotter sidecar) has not cut it.
func snapshotProgress(vs *snapshotv1.VolumeSnapshot) string {
	st := vs.Status
	switch {
	case st == nil || st.BoundVolumeSnapshotContentName == nil:
		return "no VolumeSnapshotContent is bound to it: is the snapshot controller running?"
	case st.CreationTime == nil:
		return fmt.Sprintf("VolumeSnapshotContent %s has no snapshot yet: is the CSI driver (its csi-snapshotter sidecar) running?",
			*st.BoundVolumeSnapshotContentName)
	default:
		return fmt.Sprintf("the snapshot was cut at %s but the driver has not reported it ready to use", st.CreationTime.UTC().Format(time.RFC3339))
	}
}

// desiredSnapshotClaim is a PVC restored from the run's snapshot, like the source PVC.
func desiredSnapshotClaim(pb *storagev1.PVCBackup, run *storagev1.ActiveRun, name string, source *corev1.PersistentVolumeClaim,
	vs *snapshotv1.VolumeSnapshot) *corev1.PersistentVolumeClaim {
	size := source.Spec.Resources.Requests[corev1.ResourceStorage]
	if vs.Status != nil && vs.Status.RestoreSize != nil && vs.Status.RestoreSize.Cmp(size) > 0 {
		size = *vs.Status.RestoreSize
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: pb.Namespace, Name: name, Labels: runLabels(pb, run)},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: source.Spec.StorageClassName,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			DataSource: &corev1.TypedLocalObjectReference{
				APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: vs.Name,
			},
		},
	}
}

func runLabels(pb *storagev1.PVCBackup, run *storagev1.ActiveRun) map[string]string {
	return map[string]string{storagekit.LabelBackup: pb.Name, storagekit.LabelRun: run.ID, "app.kubernetes.io/managed-by": "okgoes-operator"}
}
