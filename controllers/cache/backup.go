package cache

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/schedule"
)

// Backups of a persistent cache (spec.backup). The copy is a PVCBackup's run, owned by the cache
// (<name>-backup); what the PVCBackup cannot do on its own is make the copy consistent: Redis
// writes its snapshot when it likes, and a copy of a volume taken at an arbitrary moment holds
// whatever the last save held. So the cache controller starts every run itself:
//
//  1. a tick of spec.backup.schedule (or a new spec.backup.trigger.manual) picks the pod to save
//     (backupSource: an up-to-date replica, to keep the fork off the primary, else the primary)
//     and records the save in status.backup.save;
//  2. on a replica, it waits until the replica has applied the primary's offset of step 1, so
//     the save holds every write the primary acknowledged before the backup was decided;
//  3. it sends BGSAVE and waits (one INFO persistence a second, bounded by saveTimeout) until
//     Redis reports the save done (rdb_saves grew, no save running, last status ok);
//  4. only then it points the PVCBackup at that pod's claim and sets its spec.trigger.manual,
//     which starts the copy. The PVCBackup is suspended: its own schedule never starts a run.
//
// Every key acknowledged before step 1 (on the primary) is therefore in dump.rdb when the copy
// starts, and the copy of dump.rdb is what a restore uses (restore.go). The pvcName of the
// PVCBackup changes only in step 4, never while one of its runs is under way or due
// (pvcBackupBusy).

const (
	// backupSuffix names the PVCBackup of a cache: <name>-backup.
	backupSuffix = "-backup"
	// savePoll is how often a save under way is looked at.
	savePoll = time.Second
	// saveTimeout bounds a save (the replica catching up, a save of another that runs, the
	// BGSAVE itself); then the backup fails SaveTimedOut and the next tick tries again.
	saveTimeout = 10 * time.Minute
	// startedByAnnotation on the PVCBackup says who starts its runs.
	startedByAnnotation = "cache.okgoes.com/runs-started-by"
)

// Backup reasons (status.backup.lastReason); a failed copy carries the PVCBackup run's reason.
const (
	// ReasonNoPodToSave: no primary was elected when the backup was due; nothing was saved.
	ReasonNoPodToSave = "NoPodToSave"
	// ReasonSaveFailed: Redis reported the BGSAVE failed (rdb_last_bgsave_status:err): usually
	// a full volume or memory too tight to fork; see the pod's log.
	ReasonSaveFailed = "SaveFailed"
	// ReasonSaveLost: the Redis that was saving restarted before the save ended.
	ReasonSaveLost = "SaveLost"
	// ReasonSaveTimedOut: the save did not end within saveTimeout.
	ReasonSaveTimedOut = "SaveTimedOut"
)

func backupName(rc *cachev1beta1.RedisCache) string { return rc.Name + backupSuffix }

// dataClaimName is the claim of the pod with the ordinal i: data-<name>-<i>.
func dataClaimName(rc *cachev1beta1.RedisCache, i int) string {
	return dataVolume + "-" + rc.Name + "-" + strconv.Itoa(i)
}

// reconcileBackup keeps the PVCBackup of spec.backup, reads its runs into status.backup, and
// drives the saves that start them. It runs last: it needs the replication as observed.
func (r *RedisCacheReconciler) reconcileBackup(ctx context.Context, s *scope) error {
	rc := s.cache
	if rc.Spec.Backup == nil || rc.Spec.Persistence == nil {
		rc.Status.Backup = nil
		return r.removeBackup(ctx, rc)
	}
	if rc.Status.Backup == nil {
		rc.Status.Backup = &cachev1beta1.BackupStatus{}
	}
	st := rc.Status.Backup
	st.PVCBackup = backupName(rc)
	pb := &storagev1.PVCBackup{}
	pb.Namespace, pb.Name = rc.Namespace, backupName(rc)
	if err := r.ensure(ctx, rc, "PVCBackup", pb, func() { mutatePVCBackup(pb, rc, "", "") }); err != nil {
		return err
	}
	recordBackupRuns(st, pb)

	now := s.obs.now
	busy := st.Save != nil || pvcBackupBusy(pb)
	sched, err := schedule.Parse(rc.Spec.Backup.Schedule, "")
	if err != nil { // validateSpec refused it already; never reached
		return err
	}
	in := schedule.Input{Schedule: sched, Created: rc.CreationTimestamp.Time, Now: now, Running: busy}
	if t := st.LastScheduleTime; t != nil {
		in.LastScheduled = ptr.To(t.Time)
	}
	d := schedule.Decide(in)
	s.obs.backupRequeue = schedule.RequeueAfter(d, now)
	if d.Handled != nil {
		st.LastScheduleTime = ptr.To(metav1.NewTime(*d.Handled))
	}
	token := ""
	switch t := rc.Spec.Backup.Trigger; {
	case d.Run != nil:
		token = "scheduled-" + d.Run.UTC().Format("20060102T150405Z")
	case !busy && t != nil && schedule.ManualDue(t.Manual, st.LastManualTrigger):
		token = "manual-" + t.Manual
		st.LastManualTrigger = t.Manual
	}
	if token != "" {
		startSave(st, s.obs.replication, token, rc, now)
	}
	if st.Save == nil {
		return nil
	}
	s.obs.backupRequeue = savePoll
	return r.advanceSave(ctx, s, pb)
}

// removeBackup deletes the PVCBackup of a cache whose spec.backup was removed; its deletion
// policy decides what becomes of the backups in the bucket.
func (r *RedisCacheReconciler) removeBackup(ctx context.Context, rc *cachev1beta1.RedisCache) error {
	pb := &storagev1.PVCBackup{}
	err := r.Get(ctx, client.ObjectKey{Namespace: rc.Namespace, Name: backupName(rc)}, pb)
	if err != nil || !metav1.IsControlledBy(pb, rc) || !pb.DeletionTimestamp.IsZero() {
		return client.IgnoreNotFound(err)
	}
	return client.IgnoreNotFound(r.Delete(ctx, pb, client.Preconditions{UID: &pb.UID}))
}

// mutatePVCBackup makes pb the PVCBackup of rc's spec.backup. pvcName and trigger are set only
// when a save is done (advanceSave): they start the copy of that pod's claim.
func mutatePVCBackup(pb *storagev1.PVCBackup, rc *cachev1beta1.RedisCache, pvcName, trigger string) {
	b := rc.Spec.Backup
	pb.Labels = mergeInto(pb.Labels, childLabels(rc))
	pb.Annotations = mergeInto(pb.Annotations, map[string]string{startedByAnnotation: "RedisCache " + rc.Name +
		": suspended on purpose; each run is started through spec.trigger.manual after a BGSAVE (docs/rediscache.md, Backup and restore)"})
	pb.Spec.Schedule = b.Schedule
	pb.Spec.Suspend = true
	pb.Spec.S3Bucket = b.S3Bucket
	pb.Spec.S3 = b.S3
	pb.Spec.Engine = b.Engine
	pb.Spec.Kopia = b.Kopia
	pb.Spec.Retention = b.Retention
	pb.Spec.Verify = b.Verify
	pb.Spec.Snapshot = b.Snapshot
	pb.Spec.Mover = &storagev1.MoverOptions{PodSecurityContext: redisMoverSecurity()}
	pb.Spec.DeletionPolicy = b.DeletionPolicy
	if pb.Spec.DeletionPolicy == "" {
		pb.Spec.DeletionPolicy = storagev1.DeletionRetain
	}
	if pb.Spec.PVCName == "" {
		pb.Spec.PVCName = dataClaimName(rc, 0)
	}
	if pvcName != "" {
		pb.Spec.PVCName = pvcName
		pb.Spec.Trigger = &storagev1.Trigger{Manual: trigger}
	}
}

// redisMoverSecurity runs the mover as the Redis user: it reads what Redis wrote, and a restore
// writes files Redis may rewrite (on volumes where fsGroup does not apply, e.g. hostPath, the
// owner is what counts).
func redisMoverSecurity() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](redisUID), RunAsGroup: ptr.To[int64](redisUID), FSGroup: ptr.To[int64](redisUID)}
}

// pvcBackupBusy tells whether a run of pb is under way or due: active, or asked for by a
// trigger it has not handled yet. Its pvcName must not change then.
func pvcBackupBusy(pb *storagev1.PVCBackup) bool {
	if pb.Status.ActiveRun != nil {
		return true
	}
	return pb.Spec.Trigger != nil && schedule.ManualDue(pb.Spec.Trigger.Manual, pb.Status.LastManualTrigger)
}

// recordBackupRuns copies the PVCBackup's last finished run into st, once per run.
func recordBackupRuns(st *cachev1beta1.BackupStatus, pb *storagev1.PVCBackup) {
	last := pb.Status.LastRun
	if last == nil || (st.LastRunTime != nil && !last.CompletionTime.After(st.LastRunTime.Time)) {
		return
	}
	st.LastRunTime = ptr.To(last.CompletionTime)
	st.LastResult, st.LastReason, st.LastMessage = string(last.Result), last.Reason, last.Message
	if last.Result == storagev1.RunSucceeded {
		st.LastBackup, st.LastBackupTime = last.ID, ptr.To(last.StartTime)
	}
}

// failBackup records a backup that failed before its copy started.
func failBackup(st *cachev1beta1.BackupStatus, now time.Time, reason, message string) {
	st.Save = nil
	st.LastRunTime = ptr.To(metav1.NewTime(now))
	st.LastResult, st.LastReason, st.LastMessage = string(storagev1.RunFailed), reason, message
}

// startSave records the save of a backup that is due, on the pod backupSource picks.
func startSave(st *cachev1beta1.BackupStatus, obs *replicationObservation, token string, rc *cachev1beta1.RedisCache, now time.Time) {
	if obs == nil || obs.elected == nil {
		failBackup(st, now, ReasonNoPodToSave, "the backup "+token+" was not taken: no primary is elected, so no pod is known to hold the data; the next tick tries again")
		return
	}
	src, offset := backupSource(obs.elected, obs.members)
	st.Save = &cachev1beta1.BackupSave{Trigger: token, Pod: src.pod.Name, PVCName: dataClaimName(rc, src.ordinal),
		Since: metav1.NewTime(now), PrimaryOffset: offset}
}

// backupSource is the pod whose data a backup copies: the replica with the highest offset among
// those that are ready, linked to the primary and in sync with it (the lowest ordinal on a tie),
// so that the save's fork and the copy's reads stay off the primary; the primary when there is
// none. With a replica it also returns the primary's offset, which the replica must reach
// before it saves.
func backupSource(primary *member, members []*member) (*member, int64) {
	var best *member
	for _, m := range members {
		if m == primary || m.gone() || !m.ready() || !m.replicates(primary) || !m.info.MasterLinkUp ||
			primary.info == nil || primary.info.Offset-m.info.Offset > inSyncLagBytes {
			continue
		}
		if best == nil || m.info.Offset > best.info.Offset || (m.info.Offset == best.info.Offset && m.ordinal < best.ordinal) {
			best = m
		}
	}
	if best == nil {
		return primary, 0
	}
	return best, primary.info.Offset
}

// advanceSave moves the save in status.backup.save one step (see the top of this file): wait for
// the replica, send BGSAVE, wait for its end, start the copy. A step that cannot be taken yet is
// taken at a later reconcile, a second later, until saveTimeout.
func (r *RedisCacheReconciler) advanceSave(ctx context.Context, s *scope, pb *storagev1.PVCBackup) error {
	st, sv, now := s.cache.Status.Backup, s.cache.Status.Backup.Save, s.obs.now
	problem := r.saveStep(ctx, s, sv)
	switch {
	case problem == nil:
		return nil
	case problem.done:
		if err := r.ensure(ctx, s.cache, "PVCBackup", pb, func() { mutatePVCBackup(pb, s.cache, sv.PVCName, sv.Trigger) }); err != nil {
			return err
		}
		st.Save, st.Pod, st.PVCName = nil, sv.Pod, sv.PVCName
		s.obs.backupRequeue = 0
	case problem.reason != "":
		failBackup(st, now, problem.reason, problem.message)
	case now.Sub(sv.Since.Time) > saveTimeout:
		failBackup(st, now, ReasonSaveTimedOut, fmt.Sprintf("the save on %s for backup %s did not end within %s: %s; the next tick tries again",
			sv.Pod, sv.Trigger, saveTimeout, problem.message))
	}
	return nil
}

// saveProblem is what keeps a save from going on: done (the copy can start), a failure (reason
// set), or a wait (message only).
type saveProblem struct {
	done            bool
	reason, message string
}

// saveStep takes the next step of sv. nil: a step was taken, look again after savePoll.
func (r *RedisCacheReconciler) saveStep(ctx context.Context, s *scope, sv *cachev1beta1.BackupSave) *saveProblem {
	var m *member
	if obs := s.obs.replication; obs != nil {
		for _, x := range obs.members {
			if x.pod.Name == sv.Pod {
				m = x
			}
		}
	}
	switch {
	case m == nil || m.gone():
		return &saveProblem{message: "pod " + sv.Pod + " is gone"}
	case m.info == nil:
		return &saveProblem{message: fmt.Sprintf("pod %s does not answer: %v", sv.Pod, m.err)}
	case !sv.Started && m.info.Offset < sv.PrimaryOffset:
		return &saveProblem{message: fmt.Sprintf("replica %s has applied the replication stream up to %d, the primary was at %d", sv.Pod, m.info.Offset, sv.PrimaryOffset)}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, err := r.redis().Persistence(ctx, m.addr(), s.password)
	if err != nil {
		return &saveProblem{message: err.Error()}
	}
	if !sv.Started {
		if p.BGSaveInProgress {
			return &saveProblem{message: "a save started by Redis itself runs on " + sv.Pod + "; ours starts after it"}
		}
		if err := r.redis().BGSave(ctx, m.addr(), s.password); err != nil {
			return &saveProblem{message: err.Error()} // e.g. an append-only file rewrite runs: retried
		}
		sv.Started, sv.SavesBefore = true, p.Saves
		return nil
	}
	// Redis runs one child at a time, and ours was accepted: once no save runs, ours has ended.
	switch {
	case p.BGSaveInProgress:
		return &saveProblem{message: "the BGSAVE still runs on " + sv.Pod}
	case !p.LastBGSaveOK:
		return &saveProblem{reason: ReasonSaveFailed, message: fmt.Sprintf("Redis on %s reports the save for backup %s failed (rdb_last_bgsave_status:err): see the pod's log (a full volume, or too little memory to fork); the next tick tries again",
			sv.Pod, sv.Trigger)}
	case p.Saves <= sv.SavesBefore:
		return &saveProblem{reason: ReasonSaveLost, message: fmt.Sprintf("Redis on %s restarted during the save for backup %s (rdb_saves %d, was %d); the next tick tries again",
			sv.Pod, sv.Trigger, p.Saves, sv.SavesBefore)}
	}
	return &saveProblem{done: true}
}
