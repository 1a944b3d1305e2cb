package pvcbackup

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagek8sv1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/okgoes/okgoes-operator/internal/errclass"
)

// defaultSnapshotClassAnnotation marks the VolumeSnapshotClass a driver's snapshots get when they
// name none (the snapshot controller's own rule, which the operator applies before it creates
// anything so that a missing default is a condition, not a snapshot stuck with an error).
const defaultSnapshotClassAnnotation = "snapshot.storage.kubernetes.io/is-default-class"

// +kubebuilder:rbac:groups=snapshot.storage.k8s.io,resources=volumesnapshotclasses,verbs=get;list
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get

// resolveSnapshotClass returns the VolumeSnapshotClass the run's snapshot of pvc is taken with:
// spec.snapshot.volumeSnapshotClassName when set (it must exist and be of the PVC's driver), else
// the one default class of the PVC's CSI driver. Anything else is a Waiting condition, re-checked
// every poll, so no snapshot is created that could never become ready.
func (r *PVCBackupReconciler) resolveSnapshotClass(ctx context.Context, s *scope, pvc *corev1.PersistentVolumeClaim) (string, error) {
	name := s.backup.Spec.Snapshot.VolumeSnapshotClassName
	driver, err := r.csiDriverOf(ctx, pvc)
	if err != nil {
		return "", err
	}
	if name != "" {
		class := &snapshotv1.VolumeSnapshotClass{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, class)
		switch {
		case apierrors.IsNotFound(err):
			return "", errclass.Waiting(ReasonSnapshotClassNotFound,
				fmt.Sprintf("VolumeSnapshotClass %q named by spec.snapshot.volumeSnapshotClassName does not exist", name), r.Poll())
		case err != nil:
			return "", fmt.Errorf("get VolumeSnapshotClass: %w", err)
		case driver != "" && class.Driver != driver:
			return "", errclass.Waiting(ReasonSnapshotClassNotFound, fmt.Sprintf(
				"VolumeSnapshotClass %q named by spec.snapshot.volumeSnapshotClassName is for driver %q, but PersistentVolumeClaim %q is a volume of %q",
				name, class.Driver, pvc.Name, driver), r.Poll())
		}
		return name, nil
	}
	if driver == "" {
		return "", errclass.Waiting(ReasonNoDefaultSnapshotClass, fmt.Sprintf(
			"spec.snapshot names no volumeSnapshotClassName and the CSI driver of PersistentVolumeClaim %q is not known yet "+
				"(not bound to a CSI volume, and its storage class names no CSI provisioner): set spec.snapshot.volumeSnapshotClassName", pvc.Name), r.Poll())
	}
	classes := &snapshotv1.VolumeSnapshotClassList{}
	if err := r.APIReader.List(ctx, classes); err != nil {
		return "", fmt.Errorf("list VolumeSnapshotClasses: %w", err)
	}
	return defaultSnapshotClass(classes.Items, driver, pvc.Name, r.Poll())
}

// defaultSnapshotClass picks the one class of driver marked default, or says precisely why there
// is none to pick, listing the classes the user could name instead.
func defaultSnapshotClass(classes []snapshotv1.VolumeSnapshotClass, driver, pvc string, after time.Duration) (string, error) {
	var defaults, others []string
	for _, c := range classes {
		if c.Driver != driver {
			continue
		}
		if c.Annotations[defaultSnapshotClassAnnotation] == "true" {
			defaults = append(defaults, c.Name)
		} else {
			others = append(others, c.Name)
		}
	}
	sort.Strings(defaults)
	sort.Strings(others)
	switch {
	case len(defaults) == 1:
		return defaults[0], nil
	case len(defaults) > 1:
		return "", errclass.Waiting(ReasonNoDefaultSnapshotClass, fmt.Sprintf(
			"%d VolumeSnapshotClasses of driver %q are marked default (%s): set spec.snapshot.volumeSnapshotClassName to one of them",
			len(defaults), driver, strings.Join(defaults, ", ")), after)
	case len(others) > 0:
		return "", errclass.Waiting(ReasonNoDefaultSnapshotClass, fmt.Sprintf(
			"no VolumeSnapshotClass of driver %q (the driver of PersistentVolumeClaim %q) is marked default with the annotation %s: \"true\": "+
				"set spec.snapshot.volumeSnapshotClassName to one of %s, or annotate one of them",
			driver, pvc, defaultSnapshotClassAnnotation, strings.Join(others, ", ")), after)
	default:
		return "", errclass.Waiting(ReasonNoDefaultSnapshotClass, fmt.Sprintf(
			"the cluster has no VolumeSnapshotClass for driver %q (the driver of PersistentVolumeClaim %q): create one, marked default "+
				"with the annotation %s: \"true\" or named by spec.snapshot.volumeSnapshotClassName", driver, pvc, defaultSnapshotClassAnnotation), after)
	}
}

// csiDriverOf is the CSI driver of pvc: its PersistentVolume's, or, while it is not bound, the
// provisioner of its StorageClass. Empty when neither is known (a static non-CSI volume, say).
func (r *PVCBackupReconciler) csiDriverOf(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (string, error) {
	if pvc.Spec.VolumeName != "" {
		pv := &corev1.PersistentVolume{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv)
		switch {
		case err == nil && pv.Spec.CSI != nil:
			return pv.Spec.CSI.Driver, nil
		case err == nil:
			return "", nil
		case !apierrors.IsNotFound(err):
			return "", fmt.Errorf("get PersistentVolume: %w", err)
		}
	}
	name := ptr.Deref(pvc.Spec.StorageClassName, "")
	if name == "" {
		return "", nil
	}
	sc := &storagek8sv1.StorageClass{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, sc); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	return sc.Provisioner, nil
}
