package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OverwritePolicy says what a restore does with a target volume that is not empty: Refuse, Clean
// or Merge. The values are checked by a CEL rule, not an OpenAPI enum: the API server skips every
// CEL rule of an object that breaks an enum, so one wrong value would hide the object's other
// mistakes.
// +kubebuilder:validation:XValidation:rule="self in ['Refuse', 'Clean', 'Merge']",message="overwrite must be Refuse, Clean or Merge"
type OverwritePolicy string

const (
	// OverwriteRefuse fails the restore when the target volume holds anything (the default:
	// a restore never destroys data it was not asked to).
	OverwriteRefuse OverwritePolicy = "Refuse"
	// OverwriteClean empties the target volume first.
	OverwriteClean OverwritePolicy = "Clean"
	// OverwriteMerge writes the backup over what is there; files not in the backup stay.
	OverwriteMerge OverwritePolicy = "Merge"
)

// PVCRestoreSpec is the restore the user asks for. It is immutable: a restore runs once.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a PVCRestore runs once: its spec cannot change; create a new one"
// +kubebuilder:validation:XValidation:rule="has(self.target) != has(self.targets)",message="set exactly one of target (the backup of one PVC) and targets (a group backup: one target per member)"
// +kubebuilder:validation:XValidation:rule="!has(self.target) || has(self.target.pvcName) != has(self.target.newPVC)",message="set exactly one of target.pvcName and target.newPVC"
// +kubebuilder:validation:XValidation:rule="!has(self.paths) || size(self.paths) == 0 || !has(self.target) || !has(self.target.overwrite) || self.target.overwrite != 'Clean'",message="paths cannot be combined with target.overwrite Clean: Clean empties the whole volume, and a restore of some paths would not put the rest back; use Merge (only the named paths are written) or restore into a new PVC"
// +kubebuilder:validation:XValidation:rule="!has(self.paths) || size(self.paths) == 0 || !has(self.targets)",message="paths cannot be combined with targets: a group backup is restored whole"
type PVCRestoreSpec struct {
	// Source is the backup to restore.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Source",order=1
	Source RestoreSource `json:"source"`
	// Target is the volume to restore the backup of one PVC into. Exactly one of target and
	// targets is set.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Target",order=2
	Target *RestoreTarget `json:"target,omitempty"`
	// Targets restore a group backup (PVCBackup spec.group): one per member of the backup (its
	// status.backups[].pvcs), each naming the member (sourcePVC) and the volume it is restored
	// into, with its own overwrite policy. One mover restores them all; a target that refuses
	// (Refuse, with data) fails the restore before any target is changed. A group backup
	// restored with target, or the backup of one PVC with targets, or targets that are not
	// exactly the backup's members, or two targets naming one PVC, fail before anything is
	// touched (GroupBackup, NotAGroupBackup, TargetsMismatch, InvalidSpec). (That each PVC is
	// named once is the controller's check: a CEL rule comparing every pair costs too much.)
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=sourcePVC
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Targets (group backup)",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"},order=2
	Targets []GroupRestoreTarget `json:"targets,omitempty"`
	// Mover tunes the pod that writes the volume.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Mover",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"},order=3
	Mover *MoverOptions `json:"mover,omitempty"`
	// Paths restores only these files or directories of the backup (a directory with everything
	// under it), each relative to the volume's root as it is in the backup, e.g. "app/config" or
	// "db/pg_hba.conf"; empty: the whole backup. A path the backup does not hold fails the
	// restore (PathNotInBackup) before the target is touched. Not with target.overwrite Clean.
	// +kubebuilder:validation:MaxItems=20
	// +listType=set
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Paths",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"},order=4
	Paths []RestorePath `json:"paths,omitempty"`
}

// RestorePath is a file or directory of a backup, relative to the volume's root: slash-separated
// names, none of them empty, "." or "..".
// The length bounds are OpenAPI (they bound the CEL rules' cost); the other rules are CEL, so
// that one mistake does not hide the others (see OverwritePolicy).
// +kubebuilder:validation:MaxLength=1024
// +kubebuilder:validation:XValidation:rule="size(self) > 0",message="a path must not be empty"
// +kubebuilder:validation:XValidation:rule="!self.startsWith('/')",message="a path is relative to the volume's root: remove the leading /"
// +kubebuilder:validation:XValidation:rule="self != '..' && !self.startsWith('../') && !self.endsWith('/..') && !self.contains('/../')",message="a path must not have a .. component"
// +kubebuilder:validation:XValidation:rule="self != '.' && !self.startsWith('./') && !self.endsWith('/.') && !self.contains('/./')",message="a path must not have a . component: name the file or directory as it is under the volume's root"
// +kubebuilder:validation:XValidation:rule="self.startsWith('/') || !(self.contains('//') || self.endsWith('/'))",message="a path must not have an empty component (// or a trailing /)"
type RestorePath string

// RestoreSource names a backup: of a PVCBackup in this namespace, or at an explicit S3 location
// (backups made in another namespace or cluster).
// +kubebuilder:validation:XValidation:rule="has(self.pvcBackup) != has(self.s3)",message="set exactly one of source.pvcBackup and source.s3"
// +kubebuilder:validation:XValidation:rule="!has(self.pointInTime) || (has(self.backupID) && self.backupID != 'latest')",message="source.pointInTime needs a backupID, not latest: the backups of that time are not listed (take the id from status.backups of the PVCBackup, or from the bucket's object versions)"
type RestoreSource struct {
	// PVCBackup whose bucket, prefix and credentials hold the backup.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="PVC Backup",xDescriptors={"urn:alm:descriptor:io.kubernetes:storage.okgoes.com:v1:PVCBackup"}
	PVCBackup string `json:"pvcBackup,omitempty"`
	// S3 locates backups without a PVCBackup here.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="S3 Location",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	S3 *RestoreS3Source `json:"s3,omitempty"`
	// BackupID is the id of the backup (status.backups[].id of the PVCBackup), or "latest" for
	// the newest backup that has a manifest.
	// +kubebuilder:default=latest
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^(latest|[0-9]{8}T[0-9]{6}Z(-manual)?)$`
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Backup ID",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	BackupID string `json:"backupID,omitempty"`
	// PointInTime restores the kopia backup as the bucket held it at that time: every object of
	// the backup (its manifest, the repository's blobs) is read in the version that was current
	// then. For a bucket with object lock (PVCBackup spec.kopia.immutability) whose objects were
	// deleted or overwritten since, by someone holding the S3 credentials: the locked versions are
	// still there, hidden behind delete markers or newer versions, until their locks expire. The
	// bucket must be versioned; the restore reads only; archive backups are not supported.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Point In Time",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	PointInTime *metav1.Time `json:"pointInTime,omitempty"`
}

// RestoreS3Source is where a PVCBackup elsewhere wrote its backups:
// <location.prefix><namespace>/<pvcBackup>/ in bucket.
type RestoreS3Source struct {
	// The same CEL rules as PVCBackup spec.s3Bucket (see there why they are CEL rules).

	// Bucket holding the backups. Its name follows the S3 bucket naming rules, like PVCBackup
	// spec.s3Bucket.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="size(self) >= 3 && size(self) <= 63",message="a bucket name must be 3 to 63 characters long"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9.-]*$')",message="a bucket name may contain only lowercase letters, digits, dots (.) and hyphens (-)"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9](.*[a-z0-9])?$')",message="a bucket name must begin and end with a lowercase letter or a digit"
	// +kubebuilder:validation:XValidation:rule="!self.contains('..')",message="a bucket name must not contain two adjacent dots (..)"
	// +kubebuilder:validation:XValidation:rule="!self.contains('.-') && !self.contains('-.')",message="in a bucket name a dot must not be next to a hyphen (.- or -.)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+){3}$')",message="a bucket name must not be formatted as an IP address"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('xn--')",message="a bucket name must not start with xn--"
	// +kubebuilder:validation:XValidation:rule="!self.endsWith('-s3alias') && !self.endsWith('--ol-s3')",message="a bucket name must not end with -s3alias or --ol-s3 (reserved for access point aliases)"
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Bucket",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Bucket string `json:"bucket"`
	// Location is the endpoint, prefix and credentials (a Secret in this namespace).
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Location"
	Location S3Location `json:"location"`
	// Namespace the PVCBackup was in when it made the backups.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Namespace",xDescriptors={"urn:alm:descriptor:io.kubernetes:Namespace"}
	Namespace string `json:"namespace"`
	// PVCBackup is the name of the PVCBackup that made them.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="PVC Backup",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	PVCBackup string `json:"pvcBackup"`
}

// RestoreTarget is an existing PVC or a new one.
type RestoreTarget struct {
	// PVCName is an existing PVC in this namespace.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Existing PVC",xDescriptors={"urn:alm:descriptor:io.kubernetes:PersistentVolumeClaim"}
	PVCName string `json:"pvcName,omitempty"`
	// NewPVC creates the target PVC. It is not owned by the PVCRestore: it stays when the
	// PVCRestore is deleted.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="New PVC"
	NewPVC *NewPVCTemplate `json:"newPVC,omitempty"`
	// Overwrite says what to do when the target holds data: Refuse (the default) fails the
	// restore, Clean empties the volume first, Merge writes over it and keeps files not in the
	// backup.
	// +kubebuilder:default=Refuse
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Overwrite",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Refuse","urn:alm:descriptor:com.tectonic.ui:select:Clean","urn:alm:descriptor:com.tectonic.ui:select:Merge"}
	Overwrite OverwritePolicy `json:"overwrite,omitempty"`
	// AllowInUse restores even while a running pod mounts the target read-write (the
	// application may then see files change under it).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Allow In Use",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:booleanSwitch"}
	AllowInUse bool `json:"allowInUse,omitempty"`
}

// GroupRestoreTarget is where one member of a group backup is restored: an existing PVC or a
// new one, as target is for the backup of one PVC.
// +kubebuilder:validation:XValidation:rule="has(self.pvcName) != has(self.newPVC)",message="each of targets sets exactly one of pvcName and newPVC"
type GroupRestoreTarget struct {
	// SourcePVC is the member of the backup restored here: the name of the PVC it was backed up
	// from.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SourcePVC     string `json:"sourcePVC"`
	RestoreTarget `json:",inline"`
}

// NewPVCTemplate describes the PVC a restore creates.
type NewPVCTemplate struct {
	// Name of the new PVC.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Name",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Name string `json:"name"`
	// Size of the volume.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Size",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Size resource.Quantity `json:"size"`
	// StorageClassName; empty means the cluster default.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Storage Class",xDescriptors={"urn:alm:descriptor:io.kubernetes:storage.k8s.io:v1:StorageClass"}
	StorageClassName *string `json:"storageClassName,omitempty"`
	// AccessModes; default ReadWriteOnce.
	// +kubebuilder:validation:MaxItems=4
	// +optional
	AccessModes []corev1.PersistentVolumeAccessMode `json:"accessModes,omitempty"`
}

// RestorePhase is where a restore is.
// +kubebuilder:validation:Enum=Pending;Restoring;Succeeded;Failed
type RestorePhase string

// Restore phases.
const (
	RestorePending   RestorePhase = "Pending"
	RestoreRestoring RestorePhase = "Restoring"
	RestoreSucceeded RestorePhase = "Succeeded"
	RestoreFailed    RestorePhase = "Failed"
)

// ConditionComplete is True when the restore finished (successfully or not); its Reason says how.
const ConditionComplete = "Complete"

// PVCRestoreStatus is what the operator observed.
type PVCRestoreStatus struct {
	// ObservedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase of the restore.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Phase",xDescriptors={"urn:alm:descriptor:io.kubernetes.phase"},order=1
	Phase RestorePhase `json:"phase,omitempty"`
	// BackupID is the backup being restored (resolved from "latest").
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Backup ID",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=2
	BackupID string `json:"backupID,omitempty"`
	// ObjectKey of the archive restored.
	// +optional
	ObjectKey string `json:"objectKey,omitempty"`
	// Engine of the backup restored: Archive (ObjectKey is its archive) or Kopia (ObjectKey is
	// its manifest, SnapshotID its snapshot).
	// +optional
	Engine BackupEngine `json:"engine,omitempty"`
	// +optional
	SnapshotID string `json:"snapshotID,omitempty"`
	// TargetPVC is the PVC written (spec.target).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Target PVC",xDescriptors={"urn:alm:descriptor:io.kubernetes:PersistentVolumeClaim"},order=3
	TargetPVC string `json:"targetPVC,omitempty"`
	// Targets are the PVCs written by the restore of a group backup (spec.targets), each with
	// the member restored into it.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Targets []RestoredTarget `json:"targets,omitempty"`
	// StartTime and CompletionTime of the restore.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Duration of the restore, e.g. "1m30s".
	// +optional
	Duration string `json:"duration,omitempty"`
	// Bytes of the archive read.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// Files restored.
	// +optional
	Files int64 `json:"files,omitempty"`
	// VerifiedSHA256 is the sha256 of the archive stream, checked against the manifest.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Verified SHA-256",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=4
	VerifiedSHA256 string `json:"verifiedSHA256,omitempty"`
	// Conditions: Complete, plus Ready-style detail while waiting.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Conditions",xDescriptors={"urn:alm:descriptor:io.kubernetes.conditions"},order=5
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RestoredTarget is one member of a group backup and the PVC it is restored into.
type RestoredTarget struct {
	// SourcePVC is the member.
	SourcePVC string `json:"sourcePVC"`
	// PVC written.
	PVC string `json:"pvc"`
}

// PVCRestore restores one backup of a PVCBackup into a PVC, once.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pvcr,categories=okgoes
// +kubebuilder:printcolumn:name="Backup",type=string,JSONPath=`.status.backupID`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.status.targetPVC`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +operator-sdk:csv:customresourcedefinitions:displayName="PVC Restore",resources={{Job,v1},{PersistentVolumeClaim,v1}}
type PVCRestore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the restore asked for.
	Spec PVCRestoreSpec `json:"spec"`
	// Status is what the operator observed.
	Status PVCRestoreStatus `json:"status,omitempty"`
}

// PVCRestoreList is a list of PVCRestore.
// +kubebuilder:object:root=true
type PVCRestoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PVCRestore `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PVCRestore{}, &PVCRestoreList{})
}
