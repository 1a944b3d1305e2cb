package mover

import "time"

// RepositoryRecord is what a kopia backup run found in its repository, written (JSON) at the
// job's RecordKey after every run that opened the repository, whether the backup succeeded or
// not. The controller judges the kopia manifests with it (a manifest naming a snapshot the
// repository does not hold is a broken backup) without opening the repository itself.
//
// A record judges only the manifests it lists: those under the prefix before the run listed
// the repository. A manifest written after it (by hand, or by a run whose record write failed)
// is not confirmed by it, so a stale record never makes a backup look restorable.
type RepositoryRecord struct {
	Time  time.Time `json:"time"`  // when the run listed the repository (the mover's clock)
	RunID string    `json:"runID"` // the backup run that wrote the record
	// Repository is the key prefix of the kopia repository.
	Repository string `json:"repository"`
	// Manifests are the ids of the backups whose manifests were under the prefix before the
	// repository was listed: the backups the record judges.
	Manifests []string `json:"manifests"`
	// Snapshots are the complete snapshots of the repository, by snapshot ID.
	Snapshots map[string]RecordedSnapshot `json:"snapshots"`
	// Unlisted is why the snapshots could not be listed; then no backup of the repository can
	// be restored and Snapshots is empty.
	Unlisted string `json:"unlisted,omitempty"`
	// Damage says what in the repository is damaged, which backups depend on it and what to do;
	// empty when nothing is known to be.
	Damage string `json:"damage,omitempty"`
	// UnindexedPacks are the first (at most 20) packs in the bucket that no index lists, and
	// UnindexedCount how many there are: what a lost index blob held (or a killed run left).
	UnindexedPacks []string `json:"unindexedPacks,omitempty"`
	UnindexedCount int      `json:"unindexedCount,omitempty"`
}

// RecordedSnapshot is one snapshot of a RepositoryRecord.
type RecordedSnapshot struct {
	Backup  string `json:"backup,omitempty"`  // the id of the backup that made it (its tag)
	Problem string `json:"problem,omitempty"` // what it has lost, when it is damaged
}

// RepositoryRecordName is the name of the RepositoryRecord under a PVCBackup's prefix.
const RepositoryRecordName = "kopia-repository.json"

// Progress is what a running backup reports at EnvProgressKey.
type Progress struct {
	Time           time.Time `json:"time"`
	EstimatedBytes int64     `json:"estimatedBytes,omitempty"` // size of the volume: at the previous backup (kopia), or once scanned
	HashedBytes    int64     `json:"hashedBytes"`              // read and hashed so far
	CachedBytes    int64     `json:"cachedBytes,omitempty"`    // unchanged files not read again (kopia)
	UploadedBytes  int64     `json:"uploadedBytes"`            // written to the bucket so far
	// Phase is "maintenance" while kopia's repository maintenance runs after the backup.
	Phase string `json:"phase,omitempty"`
}

// ProgressEvery is how often a running backup writes its Progress.
const ProgressEvery = 15 * time.Second
