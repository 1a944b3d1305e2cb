package backupcatalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// LabelCatalog marks the browse Jobs of a BackupCatalog.
const LabelCatalog = "storage.okgoes.com/backupcatalog"

// browseDeadline bounds a browse Job: a listing reads a few directory objects, or one manifest.
const browseDeadline = 30 * 60

// Reasons of status.browse (besides the mover's and storagekit's S3 reasons).
const (
	ReasonBrowseBackupNotFound = string(mover.ReasonBackupNotFound) // Failed: no such source or backup id
	ReasonBrowseBackupBroken   = "BackupBroken"                     // Failed: the backup cannot be restored, nor listed
	ReasonListed               = "Listed"                           // Succeeded
)

// reconcileBrowse answers spec.browse in status.browse: it resolves the backup with the catalog
// of its source, runs one `mover list` Job for the request, and records what the Job reported.
// A finished browse's Job is deleted once its outcome is saved (the reconcile after). It returns
// when to look again (0: nothing to wait for).
func (r *BackupCatalogReconciler) reconcileBrowse(ctx context.Context, bc *storagev1.BackupCatalog, now time.Time) (time.Duration, error) {
	want := bc.Spec.Browse
	st := bc.Status.Browse
	if want == nil {
		bc.Status.Browse = nil
		return 0, r.deleteBrowseJobs(ctx, bc, "")
	}
	name := browseJobName(bc, *want)
	if st == nil || st.Request != *want {
		st = &storagev1.CatalogBrowseStatus{Request: *want}
		bc.Status.Browse = st
	}
	if st.Phase == storagev1.BrowseSucceeded || st.Phase == storagev1.BrowseFailed {
		return 0, r.deleteBrowseJobs(ctx, bc, "") // the outcome is saved
	}
	if err := r.deleteBrowseJobs(ctx, bc, name); err != nil { // of an earlier request
		return 0, err
	}
	job := &batchv1.Job{}
	err := r.Get(ctx, client.ObjectKey{Namespace: bc.Namespace, Name: name}, job)
	switch {
	case apierrors.IsNotFound(err):
		return r.startBrowse(ctx, bc, name, now)
	case err != nil:
		return 0, err
	}
	out := r.ReadMoverJob(ctx, job, job.CreationTimestamp.Time, now, browseDeadline)
	switch {
	case !out.Finished:
		st.Phase, st.Reason, st.Message = storagev1.BrowseRunning, "", ""
		if reason, msg := out.Stage("", "the browse"); reason != "" {
			st.Reason, st.Message = reason, msg
		}
		return out.Requeue(now, storagekit.RunPollInterval), nil
	case out.Failed:
		finishBrowse(st, storagev1.BrowseFailed, out.Reason, storagekit.Truncate(out.Message, 1024), now)
	default:
		recordListing(st, out.Result)
		finishBrowse(st, storagev1.BrowseSucceeded, ReasonListed, fmt.Sprintf("listed %d entries of backup %s", len(st.Entries)+int(st.MoreEntries), st.BackupID), now)
	}
	return time.Millisecond, nil // come back to delete the Job once the outcome is saved
}

// startBrowse resolves the backup of the request and creates its Job. What keeps it from
// starting is Pending (S3, credentials, password: polled) or Failed (no such backup).
func (r *BackupCatalogReconciler) startBrowse(ctx context.Context, bc *storagev1.BackupCatalog, name string, now time.Time) (time.Duration, error) {
	st, want := bc.Status.Browse, bc.Spec.Browse
	src := storagekit.S3Source{Namespace: bc.Namespace, Bucket: bc.Spec.Bucket, Location: bc.Spec.Location,
		Fields: storagekit.S3Fields{Location: "spec.location"}}
	prefix := bc.Spec.Location.Prefix + path.Join(want.Namespace, want.PVCBackup) + "/"
	entry, secret, err := r.resolveBrowsed(ctx, src, prefix, *want, now)
	if err != nil {
		return r.browseWaiting(st, err, now)
	}
	engine := storagekit.ManifestEngine(entry.Manifest)
	st.BackupID, st.Engine = entry.ID, engine.Name()
	if engine.NeedsPassword() {
		if err := storagekit.CheckPassword(secret, src, fmt.Sprintf("backup %s is a kopia backup,", entry.ID), r.Poll()); err != nil {
			return r.browseWaiting(st, err, now)
		}
	}
	depth := max(want.Depth, 1)
	env := append(engine.VerifyEnv(src, prefix, entry.ID),
		corev1.EnvVar{Name: mover.EnvListPath, Value: string(want.Path)},
		corev1.EnvVar{Name: mover.EnvListDepth, Value: strconv.Itoa(int(depth))})
	job := storagekit.DesiredMoverJob(src, r.MoverImage, storagekit.MoverJob{
		Name: name, Command: "list", Env: env, KopiaCache: engine.MoverCache(), Deadline: browseDeadline,
		Labels: map[string]string{LabelCatalog: bc.Name, "app.kubernetes.io/managed-by": "okgoes-operator",
			"app.kubernetes.io/component": "browse-mover"},
	})
	if err := storagekit.CreateOnce(ctx, r.Client, bc, job); err != nil {
		if apierrors.IsInvalid(err) {
			finishBrowse(st, storagev1.BrowseFailed, storagekit.ReasonInvalidSpec, fmt.Sprintf("the API server rejected the mover Job: %v", err), now)
			return 0, nil
		}
		return 0, fmt.Errorf("create browse Job: %w", err)
	}
	st.Phase, st.Reason, st.Message = storagev1.BrowseRunning, storagekit.ReasonNoPodYet, fmt.Sprintf("Job %s lists backup %s", name, entry.ID)
	return storagekit.RunPollInterval, nil
}

// resolveBrowsed finds the backup of the request in the catalog of its source: by id, or the
// newest restorable one for "latest". It returns the credentials Secret too (for the password).
func (r *BackupCatalogReconciler) resolveBrowsed(ctx context.Context, src storagekit.S3Source, prefix string, want storagev1.CatalogBrowse,
	now time.Time) (*storagekit.BackupEntry, *corev1.Secret, error) {
	store, secret, err := storagekit.OpenStore(ctx, r.Deps, src)
	if err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, storagekit.S3Timeout)
	defer cancel()
	cat, err := storagekit.ReadCatalog(cctx, store, prefix, now)
	if err != nil {
		return nil, nil, storagekit.ClassifyS3Error(err, src.Bucket, r.Poll())
	}
	id := want.BackupID
	for i, b := range cat.Valid {
		if id == "" || id == "latest" || b.ID == id {
			return &cat.Valid[i], secret, nil
		}
	}
	for _, b := range cat.Broken {
		if b.ID == id {
			return nil, nil, errclass.Stalled(ReasonBrowseBackupBroken, fmt.Sprintf("backup %s of %s/%s cannot be listed: %s", id, want.Namespace, want.PVCBackup, b.Problem))
		}
	}
	return nil, nil, errclass.Stalled(ReasonBrowseBackupNotFound, fmt.Sprintf("%s/%s has no restorable backup %q under %s in bucket %q: pick one of status.sources[].backups",
		want.Namespace, want.PVCBackup, id, prefix, src.Bucket))
}

// browseWaiting records why a browse cannot start: Failed for a stalled error, Pending (polled)
// for a waiting one; anything else is transient (backoff).
func (r *BackupCatalogReconciler) browseWaiting(st *storagev1.CatalogBrowseStatus, err error, now time.Time) (time.Duration, error) {
	v := errclass.Of(err)
	switch v.Class {
	case errclass.ClassStalled:
		finishBrowse(st, storagev1.BrowseFailed, v.Reason, v.Message, now)
		return 0, nil
	case errclass.ClassWaiting:
		st.Phase, st.Reason, st.Message = storagev1.BrowsePending, v.Reason, v.Message
		return r.Poll(), nil
	}
	return 0, err
}

// finishBrowse ends a browse with its outcome.
func finishBrowse(st *storagev1.CatalogBrowseStatus, phase storagev1.BrowsePhase, reason, message string, now time.Time) {
	st.Phase, st.Reason, st.Message = phase, reason, message
	st.CompletionTime = &metav1.Time{Time: now}
}

// recordListing copies the entries the mover reported.
func recordListing(st *storagev1.CatalogBrowseStatus, res mover.Result) {
	st.Entries = make([]storagev1.CatalogTreeEntry, len(res.Entries))
	for i, e := range res.Entries {
		st.Entries[i] = storagev1.CatalogTreeEntry{Path: e.Path, Type: e.Type, Bytes: e.Bytes, Files: e.Files}
	}
	st.MoreEntries, st.MoreBytes = 0, 0
	if m := res.EntriesMore; m != nil {
		st.MoreEntries, st.MoreBytes = m.Entries, m.Bytes
	}
}

// browseJobName is the Job of one browse request: a new request is a new Job, the same one never
// runs twice.
func browseJobName(bc *storagev1.BackupCatalog, req storagev1.CatalogBrowse) string {
	data, _ := json.Marshal(req)
	sum := sha256.Sum256(data)
	name := bc.Name
	if len(name) > 43 {
		name = name[:43]
	}
	return name + "-browse-" + hex.EncodeToString(sum[:5])
}

// deleteBrowseJobs deletes the browse Jobs of bc but keep (with their pods).
func (r *BackupCatalogReconciler) deleteBrowseJobs(ctx context.Context, bc *storagev1.BackupCatalog, keep string) error {
	jobs := &batchv1.JobList{}
	if err := r.List(ctx, jobs, client.InNamespace(bc.Namespace), client.MatchingLabels{LabelCatalog: bc.Name}); err != nil {
		return err
	}
	for i := range jobs.Items {
		if j := &jobs.Items[i]; j.Name != keep && j.DeletionTimestamp.IsZero() {
			if err := r.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
	}
	return nil
}
