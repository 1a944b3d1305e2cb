package pvcbackup

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	groupsnapshotv1beta2 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1beta2"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/schedule"
)

// The objects of the backup runs (pvcbackup_run.go): which are found, which are adopted as the
// started run, which are deleted once the status records their run, and the runs this process
// started that neither the status nor the cache shows yet.

// runObjects is what the listing of the PVCBackup's run objects found: the objects of runs the
// status records (to delete), and the first object of the newest run it does not record.
type runObjects struct {
	recorded []client.Object
	started  client.Object
}

// listRunObjects looks at the Jobs, snapshots and temporary PVCs of the PVCBackup's runs (found
// by their run label, from the cache's index). Those of runs whose outcome status.history records
// are to be deleted (runRecorded). The newest run that was started but that the status does not
// record yet is to be adopted (runStartedUnrecorded): the reconcile that starts a run records
// nothing (runStarted), and a manager may also have stopped in between. The objects of the active
// run, and of a run whose end the status does not record yet (a stale cache, or a status write
// that failed), are kept.
func (r *PVCBackupReconciler) listRunObjects(ctx context.Context, s *scope) (runObjects, error) {
	pb := s.backup
	var found runObjects
	recorded := func(id string) bool {
		if run := pb.Status.ActiveRun; run != nil && run.ID == id {
			return false
		}
		for _, h := range pb.Status.History {
			if h.ID == id {
				return true
			}
		}
		// Older than everything history still holds: recorded once, then rotated out.
		h := pb.Status.History
		return len(h) == historyLimit && id < h[len(h)-1].ID
	}
	var sel client.ListOption = client.MatchingLabels{storagekit.LabelBackup: pb.Name}
	if r.runObjectsIndexed {
		sel = client.MatchingFields{runObjectsIndex: pb.Name}
	}
	type kindList struct {
		kind string
		list client.ObjectList
	}
	lists := []kindList{{"Job", &batchv1.JobList{}}, {"PersistentVolumeClaim", storagekit.ClaimMetadataList()}}
	if pb.Spec.Snapshot != nil || r.SnapshotsAvailable {
		if r.snapshotsServed(ctx) {
			lists = append(lists, kindList{"VolumeSnapshot", &snapshotv1.VolumeSnapshotList{}})
		}
	}
	// consider sorts one object: recorded (to delete), the started run's first object, or kept.
	consider := func(o runtime.Object) error {
		obj := o.(client.Object)
		if !metav1.IsControlledBy(obj, pb) || !obj.GetDeletionTimestamp().IsZero() {
			return nil
		}
		if id := obj.GetLabels()[storagekit.LabelRun]; !recorded(id) {
			_, first := obj.GetAnnotations()[storagekit.AnnotationScheduledTime]
			if first && pb.Status.ActiveRun == nil && (found.started == nil || id > found.started.GetLabels()[storagekit.LabelRun]) {
				found.started = obj
			}
			return nil
		}
		found.recorded = append(found.recorded, obj)
		return nil
	}
	for _, l := range lists {
		kind, list := l.kind, l.list
		sel := sel
		if kind == "VolumeSnapshot" && !r.SnapshotsAvailable {
			sel = client.MatchingLabels{storagekit.LabelBackup: pb.Name} // the API came later: not indexed
		}
		if err := r.List(ctx, list, client.InNamespace(pb.Namespace), sel); err != nil {
			return found, fmt.Errorf("list run objects: %w", err)
		}
		if err := meta.EachListItem(list, consider); err != nil {
			return found, err
		}
	}
	if groups, err := r.listGroupSnapshots(ctx, pb); err != nil {
		return found, err
	} else if err := meta.EachListItem(groups, consider); err != nil {
		return found, err
	}
	return found, nil
}

// listGroupSnapshots lists the VolumeGroupSnapshots of pb's runs (pvcbackup_groupsnapshot.go),
// uncached, for a PVCBackup whose runs may take them: a group selector with spec.snapshot. An
// empty list for any other, and where the cluster does not serve the API.
func (r *PVCBackupReconciler) listGroupSnapshots(ctx context.Context, pb *storagev1.PVCBackup) (*groupsnapshotv1beta2.VolumeGroupSnapshotList, error) {
	list := &groupsnapshotv1beta2.VolumeGroupSnapshotList{}
	if pb.Spec.Snapshot == nil || pb.Spec.Group == nil || pb.Spec.Group.Selector == nil || r.APIReader == nil {
		return list, nil
	}
	err := r.APIReader.List(ctx, list, client.InNamespace(pb.Namespace), client.MatchingLabels{storagekit.LabelBackup: pb.Name})
	switch {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		return &groupsnapshotv1beta2.VolumeGroupSnapshotList{}, nil
	case err != nil:
		return list, fmt.Errorf("list VolumeGroupSnapshots: %w", err)
	}
	return list, nil
}

// deleteRecordedObjects deletes the objects of runs whose outcome the status records (runRecorded).
func (r *PVCBackupReconciler) deleteRecordedObjects(ctx context.Context, s *scope, objs []client.Object) error {
	for _, obj := range objs {
		err := r.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s of run %s: %w", kindOf(obj), obj.GetName(), obj.GetLabels()[storagekit.LabelRun], err)
		}
	}
	return nil
}

// kindOf names the kind of a run object in messages.
func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *batchv1.Job:
		return "Job"
	case *snapshotv1.VolumeSnapshot:
		return "VolumeSnapshot"
	case *groupsnapshotv1beta2.VolumeGroupSnapshot:
		return "VolumeGroupSnapshot"
	}
	return "PersistentVolumeClaim"
}

// adoptStartedRun records the run whose first object is obj as the active run, with what the
// reconcile that started it would have recorded: the run from the object's annotations (its
// start by the reconciler's clock), and the schedule's bookkeeping (the tick handled, the ticks
// missed before it) or the manual trigger handled. The status patch at the end of the reconcile
// saves it; the machine follows the run in the same reconcile.
func adoptStartedRun(s *scope, obj client.Object) {
	pb, a := s.backup, obj.GetAnnotations()
	scheduled, err := time.Parse(time.RFC3339, a[storagekit.AnnotationScheduledTime])
	if err != nil {
		return // not written by the operator: left alone
	}
	started, err := time.Parse(time.RFC3339, a[storagekit.AnnotationStartTime])
	if err != nil {
		return
	}
	trigger, manual := a[storagekit.AnnotationManualTrigger]
	run := &storagev1.ActiveRun{ID: obj.GetLabels()[storagekit.LabelRun], ScheduledTime: metav1.NewTime(scheduled),
		StartTime: metav1.NewTime(started), Manual: manual, Engine: storagev1.BackupEngine(a[storagekit.AnnotationEngine])}
	if run.ID != storagekit.RunID(scheduled, manual) {
		return
	}
	if pvcs := a[storagekit.AnnotationPVCs]; pvcs != "" {
		run.PVCs = strings.Split(pvcs, ",")
		run.VolumeGroupSnapshotClass = a[storagekit.AnnotationGroupSnapshotClass]
	} else if pb.Spec.IsGroup() {
		return // a group's run without its members: not written by this operator, left alone
	}
	pb.Status.ActiveRun = run
	if s.engine == "" {
		s.engine = run.Engine // status.engine, as the reconcile that started the run resolved it
	}
	if manual {
		pb.Status.LastManualTrigger = trigger
		return
	}
	in := schedule.Input{Schedule: s.schedule, Created: pb.CreationTimestamp.Time, Now: scheduled}
	if last := pb.Status.LastScheduleTime; last != nil {
		in.LastScheduled = ptr.To(last.Time)
	}
	if d := schedule.Decide(in); d.Handled != nil {
		pb.Status.MissedSchedules += int64(d.Missed)
		pb.Status.LastScheduleTime = ptr.To(metav1.NewTime(*d.Handled))
	}
}

// startedRuns remembers, per PVCBackup, the last run this process started and when, until the
// status records it. A reconcile in between may not find the run's Job in a cache that has not
// caught up, and would otherwise start a second run (a manual trigger set in that instant). After
// startedRunMemory the cache has long caught up (or the Job was deleted), and the run objects
// found decide again. The zero value is ready to use.
type startedRuns struct {
	mu   sync.Mutex
	runs map[types.NamespacedName]startedRun
}

type startedRun struct {
	id string
	at time.Time
}

const startedRunMemory = time.Minute

func (s *startedRuns) add(key types.NamespacedName, id string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == nil {
		s.runs = map[types.NamespacedName]startedRun{}
	}
	s.runs[key] = startedRun{id, at}
}

// pending tells whether the run last started for key is neither recorded in st nor forgotten.
func (s *startedRuns) pending(key types.NamespacedName, st *storagev1.PVCBackupStatus, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	run, ok := s.runs[key]
	if !ok {
		return false
	}
	recorded := st.ActiveRun != nil && st.ActiveRun.ID == run.id
	for _, h := range st.History {
		recorded = recorded || h.ID == run.id
	}
	if recorded || now.Sub(run.at) > startedRunMemory || now.Before(run.at) {
		delete(s.runs, key)
		return false
	}
	return true
}
