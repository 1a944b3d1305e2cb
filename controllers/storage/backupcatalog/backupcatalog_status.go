package backupcatalog

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/errclass"
)

// ReasonRefreshed is the reason of Ready=True: the last refresh read the whole location. The
// False reasons are storagekit's (CredentialsNotFound, CredentialsRejected, BucketNotFound,
// EndpointUnreachable, InvalidSpec, RepositoryPasswordMissing).
const ReasonRefreshed = "Refreshed"

// computeStatus is the one place the status of a refresh is built. What the bucket held is
// recorded whenever it was read completely (f set): with a missing repository password the
// backups are known, only their restore is not possible yet. A location that could not be read
// keeps the sources of the last complete read while they describe the current spec (dated by
// lastRefreshTime) and drops them when the spec changed: they would be another location's. The
// generation is observed whenever Ready says something of it; a transient error (API server,
// not S3: every S3 error is classified) changes nothing.
func computeStatus(bc *storagev1.BackupCatalog, f *found, err error, now time.Time) {
	st := &bc.Status
	verdict := errclass.Of(err)
	if verdict.Class == errclass.ClassTransient {
		return
	}
	switch {
	case f != nil:
		st.Sources, st.MoreSources, st.Backups = f.sources, f.more, int32(f.backups)
		st.LastRefreshTime = &metav1.Time{Time: now}
	case st.ObservedGeneration != bc.Generation:
		st.Sources, st.MoreSources, st.Backups, st.LastRefreshTime = nil, 0, 0, nil
	}
	st.ObservedGeneration = bc.Generation
	setReadyCondition(bc, f, verdict)
}

// setReadyCondition is Ready: True (good) with what was found, or False with the reason of the
// refresh's error, which names the cause and what to do.
func setReadyCondition(bc *storagev1.BackupCatalog, f *found, verdict errclass.Verdict) {
	c := metav1.Condition{Type: storagev1.ConditionReady, ObservedGeneration: bc.Generation}
	if verdict.Class == errclass.ClassNone {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonRefreshed, foundMessage(f)
	} else {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, verdict.Reason, verdict.Message
	}
	meta.SetStatusCondition(&bc.Status.Conditions, c)
}

// foundMessage says what a refresh found.
func foundMessage(f *found) string {
	msg := fmt.Sprintf("found %d restorable backups of %d PVCBackups", f.backups, len(f.sources))
	if f.more > 0 {
		msg += fmt.Sprintf(" (%d more PVCBackup prefixes not read: at most %d are listed; use a longer spec.location.prefix to see them)",
			f.more, storagev1.MaxCatalogSources)
	}
	return msg
}

// ready tells whether the last refresh read the whole location.
func ready(bc *storagev1.BackupCatalog) bool {
	return meta.IsStatusConditionTrue(bc.Status.Conditions, storagev1.ConditionReady)
}
