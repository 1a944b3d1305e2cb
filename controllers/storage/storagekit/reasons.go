package storagekit

import (
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// Condition reasons both storage controllers report: what they find wrong with the S3 location
// and credentials an object names, and the outcome of a mover Job (moverjob.go has the mover
// Job's own). The PVCBackup and PVCRestore packages list the reasons only they report.
const (
	ReasonInvalidSpec         = "InvalidSpec"         // False, stalled: a Job or S3 config built from the spec was rejected
	ReasonCredentialsNotFound = "CredentialsNotFound" // False, polled: Secret or key missing
	ReasonCredentialsRejected = "CredentialsRejected" // False, polled: S3 refused them
	ReasonBucketNotFound      = "BucketNotFound"      // False, polled
	ReasonEndpointUnreachable = "EndpointUnreachable" // False, polled
	// RepositoryPasswordMissing: False, polled: engine Kopia and no password in the Secret.
	ReasonRepositoryPasswordMissing = "RepositoryPasswordMissing"
	ReasonVerificationFailed        = string(mover.ReasonVerificationFailed) // True, failed: the archive does not match its manifest
	// BucketNotLockable: False, polled (the controller's check before a run), or the failed run
	// of a mover that found the same: spec.kopia.immutability and a bucket without object lock.
	ReasonBucketNotLockable = string(mover.ReasonBucketNotLockable)
	// ImmutabilityMismatch: False, the failed run of a mover that found the repository locked
	// otherwise than spec.kopia.immutability asks (or not at all); the repository is unchanged.
	ReasonImmutabilityMismatch = string(mover.ReasonImmutabilityMismatch)
)

// Truncate bounds a message kept in status (a condition, a run record) to n bytes.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
