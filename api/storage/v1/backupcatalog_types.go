package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupCatalogSpec is the bucket and prefix to look in. A BackupCatalog only reads: it never
// writes, deletes or locks anything in the bucket, so its credentials may be read-only ones.
type BackupCatalogSpec struct {
	// The same CEL rules as PVCBackup spec.s3Bucket (see there why they are CEL rules).

	// Bucket to look in. Its name follows the S3 bucket naming rules, like PVCBackup spec.s3Bucket.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="size(self) >= 3 && size(self) <= 63",message="a bucket name must be 3 to 63 characters long"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9.-]*$')",message="a bucket name may contain only lowercase letters, digits, dots (.) and hyphens (-)"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9](.*[a-z0-9])?$')",message="a bucket name must begin and end with a lowercase letter or a digit"
	// +kubebuilder:validation:XValidation:rule="!self.contains('..')",message="a bucket name must not contain two adjacent dots (..)"
	// +kubebuilder:validation:XValidation:rule="!self.contains('.-') && !self.contains('-.')",message="in a bucket name a dot must not be next to a hyphen (.- or -.)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+){3}$')",message="a bucket name must not be formatted as an IP address"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('xn--')",message="a bucket name must not start with xn--"
	// +kubebuilder:validation:XValidation:rule="!self.endsWith('-s3alias') && !self.endsWith('--ol-s3')",message="a bucket name must not end with -s3alias or --ol-s3 (reserved for access point aliases)"
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Bucket",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=1
	Bucket string `json:"bucket"`
	// Location is the endpoint, the prefix the PVCBackups used (their spec.s3.prefix) and the
	// credentials (a Secret in this namespace; with the kopia repository password under
	// credentialsSecretRef.repositoryPasswordKey, which a PVCRestore of a kopia backup needs).
	// Every PVCBackup prefix <prefix><namespace>/<name>/ under it is listed.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Location",order=2
	Location S3Location `json:"location"`
	// RefreshInterval is how often the bucket is read again (besides on every spec change);
	// default 10m, at least 1m.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="refreshInterval must be at least 1m"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('168h')",message="refreshInterval must be at most 168h"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Refresh Interval",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=3
	RefreshInterval *metav1.Duration `json:"refreshInterval,omitempty"`
	// Browse lists one backup's tree without restoring it, in status.browse: a mover Job reads
	// a kopia backup's directories (never a file's content: the sizes are kopia's directory
	// summaries) or the top level an archive backup's manifest records. Change it to list
	// something else; remove it when done.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Browse",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"},order=4
	Browse *CatalogBrowse `json:"browse,omitempty"`
}

// CatalogBrowse names a backup of status.sources and the directory of it to list.
type CatalogBrowse struct {
	// Namespace and PVCBackup of the source (status.sources[].namespace and .pvcBackup).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	PVCBackup string `json:"pvcBackup"`
	// BackupID is one of the source's backups[].id, or "latest".
	// +kubebuilder:default=latest
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^(latest|[0-9]{8}T[0-9]{6}Z(-manual)?)$`
	// +optional
	BackupID string `json:"backupID,omitempty"`
	// Path is the directory to list, relative to the volume's root; empty: the root. Archive
	// backups record only their root's entries.
	// +optional
	Path RestorePath `json:"path,omitempty"`
	// Depth is how many levels below path to list: 1 (default) to 3 (kopia backups only).
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3
	// +optional
	Depth int32 `json:"depth,omitempty"`
}

// BrowsePhase is where a browse is.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type BrowsePhase string

// Browse phases.
const (
	// BrowsePending: the browse waits for something outside the operator (credentials, the
	// repository password, S3); its reason says what. Tried again every poll interval.
	BrowsePending BrowsePhase = "Pending"
	// BrowseRunning: the mover Job lists the backup.
	BrowseRunning BrowsePhase = "Running"
	// BrowseSucceeded: entries hold the listing.
	BrowseSucceeded BrowsePhase = "Succeeded"
	// BrowseFailed: the listing cannot be made (no such backup or directory, a damaged backup,
	// an archive backup that records no tree); the reason says which. Change spec.browse to ask
	// again.
	BrowseFailed BrowsePhase = "Failed"
)

// CatalogTreeEntry is one entry of a backup's tree.
type CatalogTreeEntry struct {
	// Path relative to the volume's root.
	Path string `json:"path"`
	// Type: dir, file, symlink or other.
	Type string `json:"type"`
	// Bytes of a file; of all the files under a directory.
	Bytes int64 `json:"bytes"`
	// Files under a directory; 1 for a file.
	// +optional
	Files int64 `json:"files,omitempty"`
}

// CatalogBrowseStatus answers spec.browse.
type CatalogBrowseStatus struct {
	// Request is the spec.browse this status answers.
	Request CatalogBrowse `json:"request"`
	// Phase of the browse.
	Phase BrowsePhase `json:"phase"`
	// BackupID listed ("latest" resolved) and its Engine.
	// +optional
	BackupID string `json:"backupID,omitempty"`
	// +optional
	Engine BackupEngine `json:"engine,omitempty"`
	// Entries are the largest entries found (as many as the mover's report holds), largest first.
	// +optional
	Entries []CatalogTreeEntry `json:"entries,omitempty"`
	// MoreEntries and MoreBytes count the entries left out and their bytes.
	// +optional
	MoreEntries int64 `json:"moreEntries,omitempty"`
	// +optional
	MoreBytes int64 `json:"moreBytes,omitempty"`
	// Reason and Message say why a browse is Pending or Failed.
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// CompletionTime of a Succeeded or Failed browse.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// Bounds of BackupCatalog status: an object's status must stay well under the API server's
// object size limit whatever the bucket holds.
const (
	// MaxCatalogSources is how many PVCBackup prefixes status.sources lists (the rest are counted).
	MaxCatalogSources = 50
	// MaxCatalogBackups is how many restorable backups one source lists, newest first.
	MaxCatalogBackups = 50
	// MaxCatalogBroken is how many unusable backups one source lists.
	MaxCatalogBroken = 10
)

// CatalogSource is one PVCBackup prefix found in the bucket: the backups a PVCBackup named Name
// in Namespace made (in this cluster or another). Namespace and PVCBackup with the catalog's
// spec.bucket and spec.location are exactly PVCRestore spec.source.s3.
type CatalogSource struct {
	// Namespace the PVCBackup was in (PVCRestore spec.source.s3.namespace).
	Namespace string `json:"namespace"`
	// PVCBackup is the name of the PVCBackup (PVCRestore spec.source.s3.pvcBackup).
	PVCBackup string `json:"pvcBackup"`
	// Prefix is the key prefix of its objects in the bucket.
	Prefix string `json:"prefix"`
	// Engine of its newest restorable backup: Kopia or Archive.
	// +optional
	Engine BackupEngine `json:"engine,omitempty"`
	// Backups are the restorable backups, newest first (at most 50): those whose manifest
	// decodes and whose data the manifest names is there (an archive of the declared size; a
	// kopia snapshot the last backup run found in the repository). Use an id as PVCRestore
	// spec.source.backupID.
	// +optional
	Backups []CatalogBackup `json:"backups,omitempty"`
	// MoreBackups counts the restorable backups older than those listed.
	// +optional
	MoreBackups int32 `json:"moreBackups,omitempty"`
	// BrokenBackups are backups that cannot be restored, with the reason (at most 10).
	// +optional
	BrokenBackups []BrokenBackup `json:"brokenBackups,omitempty"`
	// MoreBrokenBackups counts the unusable backups not listed.
	// +optional
	MoreBrokenBackups int32 `json:"moreBrokenBackups,omitempty"`
	// RepositoryBytes is the size of the kopia repository's objects in the bucket (all its
	// backups together, deduplicated and compressed); unset without a kopia repository, or when
	// its objects could not be listed within a minute.
	// +optional
	RepositoryBytes *int64 `json:"repositoryBytes,omitempty"`
	// RepositoryDamage is what the last backup run found damaged in the kopia repository.
	// +optional
	RepositoryDamage string `json:"repositoryDamage,omitempty"`
}

// CatalogBackup is one restorable backup, as its manifest describes it.
type CatalogBackup struct {
	// ID of the backup (PVCRestore spec.source.backupID).
	ID string `json:"id"`
	// Time the backup stands for (its scheduled time).
	Time metav1.Time `json:"time"`
	// CompletionTime is when the backup finished writing.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Engine of the backup: Archive or Kopia.
	Engine BackupEngine `json:"engine"`
	// ContentBytes is the size of the files backed up (what a restore writes).
	ContentBytes int64 `json:"contentBytes"`
	// StoredBytes is the size of the archive in the bucket; unset for a kopia backup (its data is
	// shared with the others in the repository: see the source's repositoryBytes).
	// +optional
	StoredBytes *int64 `json:"storedBytes,omitempty"`
	// Files, Dirs and Symlinks backed up.
	Files int64 `json:"files"`
	// +optional
	Dirs int64 `json:"dirs,omitempty"`
	// +optional
	Symlinks int64 `json:"symlinks,omitempty"`
	// SnapshotID of a kopia backup in the repository.
	// +optional
	SnapshotID string `json:"snapshotID,omitempty"`
	// Confirmed is true when the last backup run of the kopia repository found this backup's
	// snapshot there (its repository record); false for a kopia backup no record has judged yet
	// (a restore proves the snapshot before it touches the target). Unset for an archive, whose
	// presence and size are checked directly.
	// +optional
	Confirmed *bool `json:"confirmed,omitempty"`
	// PVCs are the members of a group backup (PVCBackup spec.group), each under the directory
	// of its name; empty for the backup of one PVC.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	PVCs []string `json:"pvcs,omitempty"`
}

// BackupCatalogStatus is what the bucket held at the last refresh.
type BackupCatalogStatus struct {
	// ObservedGeneration is the metadata.generation the sources were read for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastRefreshTime is when the bucket was last read completely.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Last Refresh",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=1
	LastRefreshTime *metav1.Time `json:"lastRefreshTime,omitempty"`
	// Sources are the PVCBackup prefixes found, by namespace and name (at most 50).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Sources",order=2
	Sources []CatalogSource `json:"sources,omitempty"`
	// MoreSources counts the PVCBackup prefixes not listed.
	// +optional
	MoreSources int32 `json:"moreSources,omitempty"`
	// Backups counts the restorable backups of all sources (listed or not).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Backups",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=3
	Backups int32 `json:"backups,omitempty"`
	// Conditions: Ready is True when the last refresh read the whole location; its reason says
	// what went wrong otherwise.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Conditions",xDescriptors={"urn:alm:descriptor:io.kubernetes.conditions"},order=4
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Browse answers spec.browse.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Browse",order=5
	Browse *CatalogBrowseStatus `json:"browse,omitempty"`
}

// BackupCatalog lists, read-only, the backups every PVCBackup wrote under a bucket and prefix:
// what a cluster that has only the bucket, its credentials and the repository password can
// restore with a PVCRestore (spec.source.s3).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bcat,categories=okgoes
// +kubebuilder:printcolumn:name="Bucket",type=string,JSONPath=`.spec.bucket`
// +kubebuilder:printcolumn:name="Prefix",type=string,JSONPath=`.spec.location.prefix`
// +kubebuilder:printcolumn:name="Backups",type=integer,JSONPath=`.status.backups`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Refreshed",type=date,JSONPath=`.status.lastRefreshTime`
// +operator-sdk:csv:customresourcedefinitions:displayName="Backup Catalog",resources={{Job,v1}}
type BackupCatalog struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is where to look.
	Spec BackupCatalogSpec `json:"spec"`
	// Status is what was found.
	Status BackupCatalogStatus `json:"status,omitempty"`
}

// BackupCatalogList is a list of BackupCatalog.
// +kubebuilder:object:root=true
type BackupCatalogList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BackupCatalog `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BackupCatalog{}, &BackupCatalogList{})
}
