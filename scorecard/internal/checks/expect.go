package checks

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// expectation is what samples-ready waits for on an object of one kind: the operator has
// reconciled its current generation (status.observedGeneration == metadata.generation) and the
// condition named here says so with one of the documented reasons.
type expectation struct {
	condition string
	// status the condition must have; empty: any.
	status string
	// reasons the condition may carry; nil: any.
	reasons []string
	// why explains, in the test log, why full success is not asked for.
	why string
}

// expectations per kind. A kind not listed here must reach Ready=True.
//
// A RedisCache needs nothing outside the cluster: it must become Ready=True (reason Available).
// A PVCBackup, PVCRestore or BackupCatalog sample points at a PVC, an S3 endpoint and a
// credentials Secret that a scorecard namespace does not have, so for those the test asks that
// the operator reconciled the object and explained its state with a reason from
// docs/backup-restore.md (controllers/storage/pvcbackup/pvcbackup_status.go,
// controllers/storage/pvcrestore/pvcrestore_controller.go and
// controllers/storage/backupcatalog/backupcatalog_status.go).
var expectations = map[string]expectation{
	"RedisCache": {condition: "Ready", status: "True", reasons: []string{"Available"}},
	"PVCBackup": {condition: "Ready", reasons: []string{
		// True
		"Scheduled",
		// False, stalled or polled
		"InvalidSchedule", "InvalidSpec", "SnapshotsUnsupported", "PVCNotFound", "CredentialsNotFound",
		"CredentialsRejected", "BucketNotFound", "EndpointUnreachable", "BackupFailed", "VerificationFailed",
	}, why: "its PVC, S3 endpoint and credentials Secret need not exist in the scorecard namespace"},
	"PVCRestore": {condition: "Complete", reasons: []string{
		// False: waiting or running
		"SourceNotFound", "TargetNotFound", "TargetInUse", "CredentialsNotFound", "CredentialsRejected",
		"BucketNotFound", "EndpointUnreachable", "Restoring",
		// True: finished
		"Restored", "BackupNotFound", "VerificationFailed", "TargetNotEmpty", "InvalidSpec", "RestoreFailed",
	}, why: "its source backup lives in S3, which the scorecard namespace does not have"},
	"BackupCatalog": {condition: "Ready", reasons: []string{
		// True
		"Refreshed",
		// False, polled
		"CredentialsNotFound", "CredentialsRejected", "BucketNotFound", "EndpointUnreachable", "InvalidSpec",
		"RepositoryPasswordMissing",
	}, why: "its S3 endpoint and credentials Secret need not exist in the scorecard namespace"},
}

func expectationFor(kind string) expectation {
	if e, ok := expectations[kind]; ok {
		return e
	}
	return expectation{condition: "Ready", status: "True"}
}

// check tells whether u meets e, and describes the state it saw.
func (e expectation) check(u *unstructured.Unstructured) (bool, string) {
	gen := u.GetGeneration()
	observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var cond map[string]any
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == e.condition {
			cond = m
		}
	}
	if cond == nil {
		return false, fmt.Sprintf("generation %d, observedGeneration %d, no %s condition", gen, observed, e.condition)
	}
	status, _ := cond["status"].(string)
	reason, _ := cond["reason"].(string)
	message, _ := cond["message"].(string)
	state := fmt.Sprintf("%s=%s reason %s (%q), generation %d, observedGeneration %d", e.condition, status, reason, message, gen, observed)
	if observed != gen {
		return false, state
	}
	if cg, ok := cond["observedGeneration"].(int64); ok && cg != gen {
		return false, state + fmt.Sprintf(", condition observedGeneration %d", cg)
	}
	if e.status != "" && status != e.status {
		return false, state
	}
	if e.reasons != nil && !slices.Contains(e.reasons, reason) {
		return false, state + " (not a documented reason)"
	}
	return true, state
}
