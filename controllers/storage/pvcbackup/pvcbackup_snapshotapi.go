package pvcbackup

import (
	"context"
	"fmt"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
)

// snapshotsUnsupported is the message of ReasonSnapshotsUnsupported: what is missing, what to
// install, and when the operator looks again.
func snapshotsUnsupported(poll time.Duration) string {
	return fmt.Sprintf("spec.snapshot is set but the cluster does not serve the snapshot.storage.k8s.io/v1 VolumeSnapshot API: "+
		"install the VolumeSnapshot CRDs and the snapshot-controller (github.com/kubernetes-csi/external-snapshotter) and a CSI driver "+
		"that supports snapshots, or remove spec.snapshot to back up the live volume; no backup runs until then "+
		"(the operator looks for the API again every %s)", poll)
}

// snapshotAPI remembers whether the cluster serves the VolumeSnapshot API, for a reconciler that
// found it absent at setup: probe asks the API server again (discovery), at most once per TTL for
// all PVCBackups, so that CRDs installed later are found without a restart of the manager; the
// first time they are, onServed starts what the setup skipped (the watch on VolumeSnapshots).
// The zero value with a nil probe says "not served".
type snapshotAPI struct {
	mu        sync.Mutex
	served    bool
	checkedAt time.Time
	started   bool
}

// isServed tells whether the API is served, asking probe when the last answer is older than ttl.
func (a *snapshotAPI) isServed(ctx context.Context, now time.Time, ttl time.Duration,
	probe func(context.Context) (bool, error), onServed func() error) bool {
	if probe == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.served && (a.checkedAt.IsZero() || now.Sub(a.checkedAt) >= ttl || now.Before(a.checkedAt)) {
		a.checkedAt = now
		pctx, cancel := context.WithTimeout(ctx, storagekit.S3Timeout)
		served, err := probe(pctx)
		cancel()
		if err != nil {
			log.FromContext(ctx).Info("cannot tell whether the VolumeSnapshot API is served; asking again later", "error", err.Error())
		}
		a.served = served
	}
	if a.served && !a.started && onServed != nil {
		if err := onServed(); err != nil {
			log.FromContext(ctx).Error(err, "the VolumeSnapshot API appeared but its watch did not start; runs poll their snapshots")
		} else {
			a.started = true
		}
	}
	return a.served
}

// snapshotsServed tells whether the cluster serves the VolumeSnapshot API: known at setup, or
// found since (snapshotAPI).
func (r *PVCBackupReconciler) snapshotsServed(ctx context.Context) bool {
	if r.SnapshotsAvailable {
		return true
	}
	return r.snapshotAPI.isServed(ctx, r.Clock.Now(), r.Poll(), r.SnapshotAPIProbe, r.watchSnapshots)
}
