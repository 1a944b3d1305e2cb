package v1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeletionPolicy says what happens to the backups in S3 when the PVCBackup is deleted: Retain or
// Delete. The values are checked by a CEL rule, not an OpenAPI enum: the API server skips every CEL
// rule of an object that breaks an enum, so one wrong value would hide the object's other mistakes.
// +kubebuilder:validation:XValidation:rule="self in ['Retain', 'Delete']",message="deletionPolicy must be Retain or Delete"
type DeletionPolicy string

const (
	// DeletionRetain keeps the objects in S3 (the default: deleting a schedule is not deleting data).
	DeletionRetain DeletionPolicy = "Retain"
	// DeletionDelete removes every object of this PVCBackup from S3 before the PVCBackup goes away.
	DeletionDelete DeletionPolicy = "Delete"
)

// PVCBackupSpec is the backup schedule the user asks for.
// +kubebuilder:validation:XValidation:rule="!has(self.kopia) || !has(self.engine) || self.engine != 'Archive'",message="kopia options apply to the Kopia engine only: remove spec.kopia or set spec.engine to Kopia"
// +kubebuilder:validation:XValidation:rule="!(has(self.timeZone) && (self.schedule.startsWith('CRON_TZ=') || self.schedule.startsWith('TZ=')))",message="set the time zone either in timeZone or as a CRON_TZ= prefix of schedule, not both"
// +kubebuilder:validation:XValidation:rule="has(self.pvcName) != has(self.group)",message="set exactly one of spec.pvcName (one PVC) and spec.group (several PVCs backed up together)"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.group) == has(self.group)",message="a PVCBackup cannot switch between spec.pvcName and spec.group (its backups would mix both kinds): create a new PVCBackup"
type PVCBackupSpec struct {
	// PVCName is the PersistentVolumeClaim (in this namespace) to back up. Exactly one of
	// pvcName and group is set.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="PVC",xDescriptors={"urn:alm:descriptor:io.kubernetes:PersistentVolumeClaim"},order=1
	PVCName string `json:"pvcName,omitempty"`

	// Group backs several PVCs of this namespace up together, as one backup with one id: the
	// members, resolved once when a run starts (status.activeRun.pvcs), are snapshotted in the
	// same step between the before- and after-hooks (with spec.snapshot) and read by one mover,
	// each under its own directory (docs/backup-restore.md, consistent groups). One PVCRestore
	// restores them together (spec.targets).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Group of PVCs",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"},order=1
	Group *PVCGroup `json:"group,omitempty"`

	// Schedule in cron format: five fields ("0 2 * * *"), a descriptor (@hourly, @daily, @weekly,
	// @monthly, @yearly, @every 6h), optionally prefixed with CRON_TZ=<IANA zone>.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^((CRON_TZ|TZ)=[A-Za-z0-9_+/-]+ +)?(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|@every +[0-9a-z.]+|[^ ]+( +[^ ]+){4})$')",message="schedule must be five cron fields or a descriptor such as @daily or @every 6h, optionally prefixed with CRON_TZ=<zone>"
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Schedule",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=2
	Schedule string `json:"schedule"`

	// TimeZone is the IANA time zone of the schedule (e.g. Europe/Berlin); default UTC.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Time Zone",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=3
	TimeZone *string `json:"timeZone,omitempty"`

	// StartingDeadlineSeconds: a scheduled backup that could not start within this many seconds of
	// its time (operator down, previous run still going) is counted as missed instead of run late.
	// Unset: a late backup always runs (at most one catch-up run).
	// +kubebuilder:validation:Minimum=0
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Starting Deadline (seconds)",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number","urn:alm:descriptor:com.tectonic.ui:advanced"},order=4
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`

	// Suspend stops scheduling new backups; a running one finishes.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Suspend",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:booleanSwitch"},order=4
	Suspend bool `json:"suspend,omitempty"`

	// Trigger requests a backup outside the schedule.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Trigger",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"},order=4
	Trigger *Trigger `json:"trigger,omitempty"`

	// The bucket naming rules are CEL rules, each with its own message; the same rules guard
	// PVCRestore spec.source.s3.bucket. maxLength is only their cost bound, loose on purpose: a
	// maxLength violation stops the API server from running any CEL rule of the object, so a name
	// a few characters too long must fail the CEL length rule instead.

	// S3Bucket is the bucket the backups are written to. It must exist. Its name follows the S3
	// bucket naming rules: 3 to 63 lowercase letters, digits, dots and hyphens; beginning and ending
	// with a letter or digit; no two adjacent dots and no dot next to a hyphen; not formatted as an
	// IP address; no "xn--" prefix and no "-s3alias" or "--ol-s3" suffix.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="size(self) >= 3 && size(self) <= 63",message="a bucket name must be 3 to 63 characters long"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9.-]*$')",message="a bucket name may contain only lowercase letters, digits, dots (.) and hyphens (-)"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9](.*[a-z0-9])?$')",message="a bucket name must begin and end with a lowercase letter or a digit"
	// +kubebuilder:validation:XValidation:rule="!self.contains('..')",message="a bucket name must not contain two adjacent dots (..)"
	// +kubebuilder:validation:XValidation:rule="!self.contains('.-') && !self.contains('-.')",message="in a bucket name a dot must not be next to a hyphen (.- or -.)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+){3}$')",message="a bucket name must not be formatted as an IP address"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('xn--')",message="a bucket name must not start with xn--"
	// +kubebuilder:validation:XValidation:rule="!self.endsWith('-s3alias') && !self.endsWith('--ol-s3')",message="a bucket name must not end with -s3alias or --ol-s3 (reserved for access point aliases)"
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="S3 Bucket",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=5
	S3Bucket string `json:"s3Bucket"`
	// Engine chooses how backups are stored. Kopia: a kopia repository under the PVCBackup's
	// prefix (content-defined chunks, deduplicated across backups, encrypted with the password
	// in the credentials Secret, see s3.credentialsSecretRef.repositoryPasswordKey): a second
	// backup uploads only what changed. Archive: one tar+zstd archive per backup, unencrypted,
	// restorable with `zstd -d | tar x`. Empty: Kopia, unless the prefix already holds archive
	// backups (made before the operator had kopia), which then go on as Archive; status.engine
	// says which. Backups of either engine stay restorable whatever this field says later.
	// +kubebuilder:validation:Enum=Kopia;Archive
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Engine",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Kopia","urn:alm:descriptor:com.tectonic.ui:select:Archive"},order=7
	Engine BackupEngine `json:"engine,omitempty"`

	// Kopia tunes the kopia repository (engine Kopia). It is set only with engine Kopia or
	// empty: an archive has no repository.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Kopia",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"},order=7
	Kopia *KopiaOptions `json:"kopia,omitempty"`

	// S3 is where and how to reach the bucket.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="S3",order=6
	S3 S3Location `json:"s3"`

	// Snapshot takes a crash-consistent CSI VolumeSnapshot of the PVC and backs that up. Without it,
	// the PVC itself is mounted read-only by the mover (it must allow a second reader).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Snapshot",order=8
	Snapshot *SnapshotOptions `json:"snapshot,omitempty"`

	// Mover tunes the pod that reads the volume and streams it to S3.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Mover",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"},order=9
	Mover *MoverOptions `json:"mover,omitempty"`

	// DeletionPolicy says what happens to the backups in S3 when this PVCBackup is deleted:
	// Retain (the default) keeps them; Delete removes every object of this PVCBackup first.
	// +kubebuilder:default=Retain
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Deletion Policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Retain","urn:alm:descriptor:com.tectonic.ui:select:Delete"},order=10
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// Verify downloads each new backup right after it is written and checks it against its
	// manifest (sha256, size, file counts), in a second mover Job that mounts no volume. The
	// result is lastRun.verified; a failed verification makes Ready False (VerificationFailed, or
	// RepositoryDamaged for a kopia repository). The one write it may make: a kopia verify that
	// finds damaged contents drops them from the repository's index, so that the next backup
	// uploads them again (docs/kopia.md).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Verify",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:booleanSwitch"},order=10
	Verify bool `json:"verify,omitempty"`

	// Hooks are commands the operator runs in the application's pods around each backup: the
	// before-hooks before the snapshot (or, without spec.snapshot, the copy) starts, the
	// after-hooks once the snapshot is taken (or the upload is over), and also when the run fails
	// after any before-hook ran, so that a frozen application is always thawed
	// (docs/application-backups.md).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Hooks",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"},order=12
	Hooks *BackupHooks `json:"hooks,omitempty"`

	// Retention prunes old backups after each successful one. Unset keeps every backup. When set,
	// at least one of keepLast, keepDaily, keepWeekly and keepMonthly must be above 0: a retention
	// with every rule 0 (e.g. {keepLast: 0}) is rejected, as it could mean "keep nothing" as well
	// as "keep everything".
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Retention",order=11
	Retention *Retention `json:"retention,omitempty"`
}

// MaxGroupMembers is the most PVCs one group backup holds.
const MaxGroupMembers = 16

// PVCGroup is the PVCs of a group backup: a list, or a label selector evaluated when each run
// starts. Exactly one of pvcNames and selector is set.
// +kubebuilder:validation:XValidation:rule="has(self.pvcNames) != has(self.selector)",message="group must set exactly one of pvcNames and selector"
type PVCGroup struct {
	// PVCNames lists the members: 2 to 16 distinct PVC names of this namespace.
	// +kubebuilder:validation:MinItems=2
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +listType=set
	// +optional
	PVCNames []string `json:"pvcNames,omitempty"`
	// Selector picks the members among the PVCs of this namespace by label, when each run
	// starts: none matching is Ready=False GroupEmpty, more than 16 GroupTooLarge (both polled).
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="group.selector must set matchLabels or matchExpressions: an empty selector would pick every PVC of the namespace"
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// IsGroup tells whether the PVCBackup backs up a group of PVCs (spec.group).
func (s *PVCBackupSpec) IsGroup() bool { return s.Group != nil }

// BackupHooks are the before- and after-hooks of every backup run, each list run in order.
// +kubebuilder:validation:XValidation:rule="(has(self.before) && size(self.before) > 0) || (has(self.after) && size(self.after) > 0)",message="hooks must list at least one before or after hook: remove hooks to run none"
type BackupHooks struct {
	// Before run, in order, before the snapshot or the copy starts. A before-hook that fails
	// with onError Fail ends the run: no backup is made, and the after-hooks run.
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Before []BackupHook `json:"before,omitempty"`
	// After run, in order, once the snapshot is taken (with spec.snapshot) or the upload is
	// over (without), and whenever the run fails after the before-hooks started.
	// +kubebuilder:validation:MaxItems=8
	// +optional
	After []BackupHook `json:"after,omitempty"`
}

// HookOnError says what a failing hook does to the run: Fail or Continue.
// +kubebuilder:validation:XValidation:rule="self in ['Fail', 'Continue']",message="onError must be Fail or Continue"
type HookOnError string

const (
	// HookFail ends the run when the hook fails (the default). A failing after-hook makes a
	// run whose backup was written fail too: the application may not have been thawed.
	HookFail HookOnError = "Fail"
	// HookContinue records the failure (a Warning event HookFailedContinuing) and goes on.
	HookContinue HookOnError = "Continue"
)

// BackupHook is one command run in one container of every running pod the selector matches in
// the PVCBackup's namespace, through the pods/exec API, as the container's own user.
type BackupHook struct {
	// Selector picks the pods, in the PVCBackup's namespace only. Every running pod it matches
	// runs the command, in order of pod name; none matching fails the hook (HookPodNotFound).
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="selector must set matchLabels or matchExpressions: an empty selector would pick every pod of the namespace"
	Selector metav1.LabelSelector `json:"selector"`
	// Container to run the command in; default the pod's first container.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Container string `json:"container,omitempty"`
	// Command in exec form: the program and its arguments, no shell implied (use
	// ["sh", "-c", "..."] for one). Its exit code decides the hook: 0 is success.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="size(self[0]) > 0",message="command[0] must name the program to run"
	Command []string `json:"command"`
	// Timeout of the command, from 1s to 10m, e.g. "30s"; default 30s. At the timeout the exec
	// is cancelled and the hook fails with HookTimedOut (the command itself may go on in the
	// container: cancelling the stream is all the API offers).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('10m')",message="timeout must be a duration from 1s to 10m, e.g. 30s or 2m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// OnError is what a failure does to the run: Fail (the default) or Continue.
	// +kubebuilder:default=Fail
	// +optional
	OnError HookOnError `json:"onError,omitempty"`
}

// DefaultHookTimeout is the timeout of a hook that sets none.
const DefaultHookTimeout = 30 * time.Second

// TimeoutOrDefault is how long the hook's command may run.
func (h *BackupHook) TimeoutOrDefault() time.Duration {
	if h.Timeout == nil {
		return DefaultHookTimeout
	}
	return h.Timeout.Duration
}

// Continues tells whether the run goes on when the hook fails.
func (h *BackupHook) Continues() bool { return h.OnError == HookContinue }

// Retention says which backups to keep, restic-style: a backup kept by any rule survives, and the
// newest backup is never pruned. Days, weeks and months are those of the schedule's time zone.
// A rule that is 0 or absent keeps nothing by itself; at least one rule must be above 0.
// +kubebuilder:validation:XValidation:rule="(has(self.keepLast) && self.keepLast > 0) || (has(self.keepDaily) && self.keepDaily > 0) || (has(self.keepWeekly) && self.keepWeekly > 0) || (has(self.keepMonthly) && self.keepMonthly > 0)",message="retention must keep at least one backup: set keepLast, keepDaily, keepWeekly or keepMonthly, or remove retention to keep all"
type Retention struct {
	// KeepLast keeps the newest N backups.
	// +kubebuilder:validation:Minimum=0
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Keep Last",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"}
	KeepLast int32 `json:"keepLast,omitempty"`
	// KeepDaily keeps the newest backup of each of the last N days that have one.
	// +kubebuilder:validation:Minimum=0
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Keep Daily",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"}
	KeepDaily int32 `json:"keepDaily,omitempty"`
	// KeepWeekly keeps the newest backup of each of the last N ISO weeks that have one.
	// +kubebuilder:validation:Minimum=0
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Keep Weekly",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"}
	KeepWeekly int32 `json:"keepWeekly,omitempty"`
	// KeepMonthly keeps the newest backup of each of the last N months that have one.
	// +kubebuilder:validation:Minimum=0
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Keep Monthly",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"}
	KeepMonthly int32 `json:"keepMonthly,omitempty"`
}

// BrokenBackup is an object under the backup prefix that is not a usable backup.
type BrokenBackup struct {
	// ID the object's name stands for.
	// +kubebuilder:validation:MaxLength=256
	ID string `json:"id"`
	// Problem found, e.g. "archive ... does not exist".
	// +kubebuilder:validation:MaxLength=1024
	Problem string `json:"problem"`
}

// BackupRef is one restorable backup in the bucket (one with a manifest).
type BackupRef struct {
	// ID of the backup (use it as PVCRestore spec.source.backupID).
	ID string `json:"id"`
	// Time the backup stands for.
	Time metav1.Time `json:"time"`
	// ObjectKey of the archive, or of the manifest of a kopia backup.
	ObjectKey string `json:"objectKey"`
	// Engine of the backup: Archive or Kopia.
	// +optional
	Engine BackupEngine `json:"engine,omitempty"`
	// SnapshotID of a kopia backup in the repository (`kopia snapshot restore <id>`).
	// +optional
	SnapshotID string `json:"snapshotID,omitempty"`
	// PVCs are the members of a group backup, each under the directory of its name in the
	// backup; empty for the backup of one PVC.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	PVCs []string `json:"pvcs,omitempty"`
}

// Trigger requests backups outside the schedule.
type Trigger struct {
	// Manual starts one backup each time it is set to a new value (e.g. a date or a counter).
	// +kubebuilder:validation:MaxLength=128
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Manual Trigger",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Manual string `json:"manual,omitempty"`
}

// S3Location is an S3-compatible endpoint, the key prefix in the bucket, and how to authenticate.
type S3Location struct {
	// Endpoint is host[:port] of the S3 API, without scheme (e.g. s3.eu-west-1.amazonaws.com,
	// minio.backup.svc:9000).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9.-]+(:[0-9]{1,5})?$`
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Endpoint",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Endpoint string `json:"endpoint"`

	// Region of the bucket, when the endpoint needs one.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Region",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Region string `json:"region,omitempty"`

	// Prefix is prepended to every object key (e.g. "prod/"). Backups of this PVCBackup live under
	// <prefix><namespace>/<name>/.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^([^/].*)?$`
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Prefix",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Prefix string `json:"prefix,omitempty"`

	// CredentialsSecretRef names the Secret with the access key and secret key. Credentials are
	// only ever passed by reference: the operator reads them to talk to S3 itself (bucket check,
	// deletion) and the mover receives them as secretKeyRef environment variables.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Credentials Secret"
	CredentialsSecretRef CredentialsSecretRef `json:"credentialsSecretRef"`

	// Insecure uses plain HTTP. Only for endpoints inside a trusted network.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Insecure (HTTP)",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:booleanSwitch"}
	Insecure bool `json:"insecure,omitempty"`

	// CABundleSecretRef names a Secret key with PEM certificates to trust for the endpoint, in
	// addition to the system roots.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="CA Bundle Secret",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	CABundleSecretRef *SecretKeySelector `json:"caBundleSecretRef,omitempty"`
}

// BackupEngine is how backups are stored (spec.engine).
type BackupEngine string

const (
	EngineKopia   BackupEngine = "Kopia"
	EngineArchive BackupEngine = "Archive"
)

// KopiaOptions tune the kopia repository of a PVCBackup.
type KopiaOptions struct {
	// KeyDerivation is how a new repository turns the password into its key; every mover run
	// derives the key once. Scrypt (the default, kopia's own, scrypt-65536-8-1): memory-hard,
	// about 0.2 to 0.6 s of CPU and 64 MiB per run. PBKDF2 (pbkdf2-sha256-600000, the iteration
	// count OWASP recommends; FIPS 140 approved): about 0.1 s per run, but cheaper to guess on
	// GPUs than scrypt, so use it with a long random password. It applies when the repository is
	// created, by the first backup: an existing repository keeps its own, shown in
	// status.repository.keyDerivation.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Key Derivation",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Scrypt","urn:alm:descriptor:com.tectonic.ui:select:PBKDF2"}
	KeyDerivation KeyDerivation `json:"keyDerivation,omitempty"`
	// Compression is kopia's compressor of the new data of every backup. Empty means the
	// operator's default, zstd (restic's compressor and level: source trees and logs stored in
	// restic's bytes; docs/benchmarks.md, "Storage: compression and chunking"). zstd-fastest:
	// less CPU, a few percent more bytes; zstd-better-compression: fewer bytes, more CPU.
	// s2-default, s2-better: the least CPU, 1.4 to 1.6 times zstd's bytes on text (the default
	// before 0.5.0). pgzip: gzip on several cores. none: for data that never compresses (kopia
	// stores a chunk that does not shrink as it is with any compressor, but spends the CPU
	// trying). A change applies from the next backup on, to existing repositories too: data
	// already stored keeps its compression and is not uploaded again (kopia recognizes data by
	// its uncompressed content), restores read both.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Compression",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	Compression KopiaCompression `json:"compression,omitempty"`
	// Splitter is how a new repository cuts files into chunks, by kopia's name: DYNAMIC-<size>-BUZHASH
	// (content-defined boundaries, chunks of half to twice the size: an insertion moves few
	// boundaries) or FIXED-<size> (fixed offsets: for images and databases rewritten in place
	// only). Smaller chunks make a backup after scattered small rewrites (database pages, VM
	// disk blocks) upload less, at the cost of more index entries (memory and time of every run
	// over a large volume). Empty means the operator's default, DYNAMIC-1M-BUZHASH (restic's
	// bytes after such rewrites; kopia's own default, DYNAMIC-4M-BUZHASH, uploaded 2 to 2.7 times
	// as much). It applies when the repository is created, by the first backup: an existing
	// repository keeps its own, shown in status.repository.splitter, and a different splitter
	// here is reported as SplitterApplied=False SplitterMismatch (the backups go on with the
	// repository's); a new spec.s3.prefix makes a new repository with it.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Splitter",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	Splitter KopiaSplitter `json:"splitter,omitempty"`
	// Immutability creates the repository with S3 Object Lock retention on every blob it
	// writes (kopia's blob retention), so that no one holding the operator's S3 credentials
	// can delete or overwrite a backup for that long; maintenance extends the lock of every
	// blob still in use. The bucket must have been created with object lock (which turns
	// versioning on). It applies when the repository is created, by the first backup: an
	// existing repository keeps its own, shown in status.repository.immutability, and a
	// different setting here is reported as Ready=False ImmutabilityMismatch. Storage: every
	// blob, including those retention or maintenance deletes, stays in the bucket until its
	// lock expires (docs/backup-restore.md, immutable backups).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Immutability",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	Immutability *Immutability `json:"immutability,omitempty"`
}

// Immutability is the S3 Object Lock retention of a kopia repository's blobs. Both fields are
// required, by a CEL rule rather than the schema's required list: the API server skips every CEL
// rule of an object that misses a required field.
// +kubebuilder:validation:XValidation:rule="has(self.mode) && has(self.days)",message="immutability needs both mode (Governance or Compliance) and days (2 to 3650)"
type Immutability struct {
	// Mode is the S3 Object Lock mode. Governance: a user with the
	// s3:BypassGovernanceRetention permission can still shorten the lock or delete a locked
	// version (keep that permission away from the operator's credentials). Compliance: no one,
	// not even the bucket's root account, can until the lock expires.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Mode",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Governance","urn:alm:descriptor:com.tectonic.ui:select:Compliance"}
	// +optional
	Mode ImmutabilityMode `json:"mode,omitempty"`
	// Days each blob stays locked after it is written or after the maintenance that last
	// extended its lock. At least 2: kopia extends the locks in full maintenance, once a day,
	// and needs the period to exceed that interval by a day. Backups must run at most days-1
	// days apart, or blobs still in use would lose their lock before maintenance extends it: a
	// schedule with runs further apart is Ready=False InvalidSpec.
	// +kubebuilder:validation:XValidation:rule="self >= 2 && self <= 3650",message="immutability.days must be from 2 to 3650: kopia extends the locks once a day in full maintenance and needs the period to be at least a day longer"
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Days",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"}
	// +optional
	Days int32 `json:"days,omitempty"`
}

// ImmutabilityMode is an S3 Object Lock mode (spec.kopia.immutability.mode). The values are
// checked by a CEL rule, not an OpenAPI enum, as for DeletionPolicy.
// +kubebuilder:validation:XValidation:rule="self in ['Governance', 'Compliance']",message="immutability.mode must be Governance or Compliance"
type ImmutabilityMode string

const (
	// ImmutabilityGovernance is S3's GOVERNANCE mode: s3:BypassGovernanceRetention overrides it.
	ImmutabilityGovernance ImmutabilityMode = "Governance"
	// ImmutabilityCompliance is S3's COMPLIANCE mode: nothing overrides it until it expires.
	ImmutabilityCompliance ImmutabilityMode = "Compliance"
)

// KeyDerivation is a kopia repository's password key derivation (spec.kopia.keyDerivation).
// The values are checked by a CEL rule, not an OpenAPI enum, as for DeletionPolicy.
// +kubebuilder:validation:XValidation:rule="self in ['Scrypt', 'PBKDF2']",message="keyDerivation must be Scrypt or PBKDF2"
type KeyDerivation string

const (
	// KeyDerivationScrypt is kopia's scrypt-65536-8-1, its default.
	KeyDerivationScrypt KeyDerivation = "Scrypt"
	// KeyDerivationPBKDF2 is kopia's pbkdf2-sha256-600000.
	KeyDerivationPBKDF2 KeyDerivation = "PBKDF2"
)

// KopiaCompression is a kopia compressor's name (spec.kopia.compression). The values are checked
// by a CEL rule, not an OpenAPI enum, as for DeletionPolicy.
// +kubebuilder:validation:XValidation:rule="self in ['none', 's2-default', 's2-better', 'zstd-fastest', 'zstd', 'zstd-better-compression', 'pgzip']",message="compression must be one of none, s2-default, s2-better, zstd-fastest, zstd, zstd-better-compression, pgzip"
type KopiaCompression string

// KopiaSplitter is a kopia splitter's name (spec.kopia.splitter). The values are checked by a CEL
// rule, not an OpenAPI enum, as for DeletionPolicy.
// +kubebuilder:validation:XValidation:rule="self in ['DYNAMIC-512K-BUZHASH', 'DYNAMIC-1M-BUZHASH', 'DYNAMIC-2M-BUZHASH', 'DYNAMIC-4M-BUZHASH', 'DYNAMIC-8M-BUZHASH', 'FIXED-512K', 'FIXED-1M', 'FIXED-2M', 'FIXED-4M']",message="splitter must be one of DYNAMIC-512K-BUZHASH, DYNAMIC-1M-BUZHASH, DYNAMIC-2M-BUZHASH, DYNAMIC-4M-BUZHASH, DYNAMIC-8M-BUZHASH, FIXED-512K, FIXED-1M, FIXED-2M, FIXED-4M"
type KopiaSplitter string

// DefaultRepositoryPasswordKey is the key of the kopia repository password in the credentials
// Secret: the variable the kopia CLI reads, so the Secret also serves `kopia repository connect`.
const DefaultRepositoryPasswordKey = "KOPIA_PASSWORD"

// CredentialsSecretRef names a Secret and the keys of the S3 credentials in it.
type CredentialsSecretRef struct {
	// Name of the Secret in this namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Secret Name",xDescriptors={"urn:alm:descriptor:io.kubernetes:Secret"}
	Name string `json:"name"`
	// AccessKeyIDKey is the key of the access key ID.
	// +kubebuilder:default=AWS_ACCESS_KEY_ID
	// +kubebuilder:validation:MaxLength=253
	// +optional
	AccessKeyIDKey string `json:"accessKeyIDKey,omitempty"`
	// SecretAccessKeyKey is the key of the secret access key.
	// +kubebuilder:default=AWS_SECRET_ACCESS_KEY
	// +kubebuilder:validation:MaxLength=253
	// +optional
	SecretAccessKeyKey string `json:"secretAccessKeyKey,omitempty"`
	// RepositoryPasswordKey is the key of the password that encrypts the kopia repository
	// (engine Kopia). Keep a copy of it outside the cluster: without it no backup can be
	// restored. Changing the Secret's value does not change the repository's password.
	// +kubebuilder:default=KOPIA_PASSWORD
	// +kubebuilder:validation:MaxLength=253
	// +optional
	RepositoryPasswordKey string `json:"repositoryPasswordKey,omitempty"`
}

// SecretKeySelector is a key of a Secret in the same namespace.
type SecretKeySelector struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Secret Name",xDescriptors={"urn:alm:descriptor:io.kubernetes:Secret"}
	Name string `json:"name"`
	// Key in the Secret.
	// +kubebuilder:default=ca.crt
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// SnapshotOptions selects the CSI snapshot class. `snapshot: {}` takes the snapshot with the
// default VolumeSnapshotClass of the PVC's CSI driver.
type SnapshotOptions struct {
	// VolumeSnapshotClassName of the snapshot taken before each backup. Empty: the
	// VolumeSnapshotClass of the PVC's CSI driver annotated
	// snapshot.storage.kubernetes.io/is-default-class: "true" (exactly one must be).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Volume Snapshot Class",xDescriptors={"urn:alm:descriptor:io.kubernetes:snapshot.storage.k8s.io:v1:VolumeSnapshotClass"}
	VolumeSnapshotClassName string `json:"volumeSnapshotClassName,omitempty"`
}

// MoverOptions tune the mover pod.
type MoverOptions struct {
	// PodSecurityContext of the mover pod, e.g. fsGroup or runAsUser to read a volume owned by a
	// non-root user. The mover always runs with no privilege escalation, all capabilities dropped
	// and the RuntimeDefault seccomp profile.
	// +optional
	PodSecurityContext *corev1.PodSecurityContext `json:"podSecurityContext,omitempty"`
	// Resources of the mover container.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Resources",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:resourceRequirements"}
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// ActiveDeadlineSeconds bounds one mover Job (a backup, its verification, or a restore), from
	// its creation, waiting for a pod included: past it the Job is stopped and the run ends
	// Failed with reason DeadlineExceeded. Default 21600 (6 hours), at most 604800 (7 days): a
	// run longer than a week outlives any daily schedule and the operator's deadline arithmetic
	// stays far from overflowing a time.Duration. The bound is a CEL rule, not an OpenAPI
	// maximum, so that OLM's upgrade check passes with objects stored before it (docs/upgrades.md).
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:XValidation:rule="self <= 604800",message="activeDeadlineSeconds must be at most 604800 (7 days): a run that may last longer never ends in time for the next one"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Active Deadline (seconds)",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"}
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`
	// StorageIdleTimeout ends a mover (backup, verify or restore) whose S3 requests have made no
	// progress for this long (a frozen server, a stalled network): the run fails with reason
	// StorageStalled instead of waiting for its deadline. Every S3 request of the mover counts,
	// closing the kopia repository included. A duration from 10s to 1h, e.g. "90s" or "10m";
	// default 5m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) >= duration('10s') && duration(self) <= duration('1h')",message="storageIdleTimeout must be a duration from 10s to 1h, e.g. 90s or 10m"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Storage Idle Timeout",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	StorageIdleTimeout *metav1.Duration `json:"storageIdleTimeout,omitempty"`
}

// DefaultStorageIdleTimeout is the StorageIdleTimeout of MoverOptions that set none (the
// mover's own default, internal/mover DefaultIdleTimeout, is the same).
const DefaultStorageIdleTimeout = 5 * time.Minute

// StorageIdle is how long the mover's S3 requests may make no progress.
func (m *MoverOptions) StorageIdle() time.Duration {
	if m == nil || m.StorageIdleTimeout == nil {
		return DefaultStorageIdleTimeout
	}
	return m.StorageIdleTimeout.Duration
}

// DefaultActiveDeadlineSeconds bounds a mover Job whose MoverOptions set no deadline.
const DefaultActiveDeadlineSeconds = 6 * 3600

// Deadline is how long one mover Job may run.
func (m *MoverOptions) Deadline() int64 {
	if m == nil || m.ActiveDeadlineSeconds == nil {
		return DefaultActiveDeadlineSeconds
	}
	return *m.ActiveDeadlineSeconds
}

// Condition types of a PVCBackup.
const (
	// ConditionReady is True (good) when the schedule, the PVC and the credentials are usable and
	// the last backup did not fail.
	ConditionReady = "Ready"
	// ConditionRunning is True while a backup runs; its Reason tells the stage, or why none runs.
	ConditionRunning = "Running"
	// ConditionDeletionFailed is True (bad) when deleting this PVCBackup's objects from S3 failed.
	ConditionDeletionFailed = "DeletionFailed"
	// ConditionRepositoryHealthy (kopia engine) is True (good) when the last backup run found
	// nothing damaged in the repository, False (RepositoryDamaged) when it found lost or
	// unreadable objects, Unknown until a run has looked (status.repository.check).
	ConditionRepositoryHealthy = "RepositoryHealthy"
	// ConditionSplitterApplied (kopia engine, only while spec.kopia.splitter is set) is True
	// (good) when the repository cuts files with the splitter the spec asks for, False
	// (SplitterMismatch) when it was created with another one: it keeps its own, the backups go
	// on with it. Absent until a run has reported the repository's splitter.
	ConditionSplitterApplied = "SplitterApplied"
)

// RunResult is the outcome of one backup run.
// +kubebuilder:validation:Enum=Succeeded;Failed
type RunResult string

// Run results.
const (
	RunSucceeded RunResult = "Succeeded"
	RunFailed    RunResult = "Failed"
)

// RepositoryStatus describes a kopia repository after a run.
type RepositoryStatus struct {
	// Bytes the repository occupies in the bucket.
	Bytes int64 `json:"bytes"`
	// KeyDerivation the repository was created with: Scrypt or PBKDF2 (spec.kopia.keyDerivation),
	// or kopia's name of another algorithm.
	// +optional
	KeyDerivation string `json:"keyDerivation,omitempty"`
	// Splitter is kopia's name of the splitter the repository was created with (spec.kopia.splitter
	// when it created it), e.g. DYNAMIC-1M-BUZHASH (DYNAMIC-4M-BUZHASH: created before 0.5.0):
	// every backup into it cuts files with it.
	// +optional
	Splitter string `json:"splitter,omitempty"`
	// Immutability is the S3 Object Lock retention the repository was created with
	// (spec.kopia.immutability); absent when its blobs are not locked.
	// +optional
	Immutability *RepositoryImmutability `json:"immutability,omitempty"`
	// LastQuickMaintenance and LastFullMaintenance are the last successful maintenance runs.
	// Maintenance runs in the backup Job after the backup (quick hourly, full daily, when due):
	// the data of deleted snapshots leaves the bucket only through full maintenance, days later.
	// +optional
	LastQuickMaintenance *metav1.Time `json:"lastQuickMaintenance,omitempty"`
	// +optional
	LastFullMaintenance *metav1.Time `json:"lastFullMaintenance,omitempty"`
	// MaintenanceMessage is why the last maintenance failed (the backup itself succeeded).
	// +optional
	MaintenanceMessage string `json:"maintenanceMessage,omitempty"`
	// Check is what the last backup run found when it looked at the whole repository; the
	// RepositoryHealthy condition says the same at a glance.
	// +optional
	Check *RepositoryCheck `json:"check,omitempty"`
	// PasswordChangeTime is when a backup run last changed the repository's password: it opened
	// the repository only with the credentials Secret's "<key>.previous" and made the password
	// under the key the repository's only one (docs/kopia.md, password rotation). From then on
	// "<key>.previous" is no longer needed.
	// +optional
	PasswordChangeTime *metav1.Time `json:"passwordChangeTime,omitempty"`
	// UpdateTime is when the run that reported this ended.
	UpdateTime metav1.Time `json:"updateTime"`
}

// RepositoryImmutability is a repository's blob retention as kopia stores it (kopia.blobcfg).
type RepositoryImmutability struct {
	// Mode is Governance or Compliance, or kopia's name of another mode.
	Mode string `json:"mode"`
	// Period is the retention period, as a Go duration (168h0m0s for 7 days).
	Period metav1.Duration `json:"period"`
}

// RepositoryCheck is what a backup run found in the kopia repository: each run lists the
// repository's snapshots and packs once, after its backup (or after kopia failed to make it),
// and the operator judges every kopia backup's manifest against that listing.
type RepositoryCheck struct {
	// Time of the listing (the mover's clock).
	Time metav1.Time `json:"time"`
	// RunID is the backup run that looked.
	RunID string `json:"runID"`
	// Snapshots is the number of complete snapshots the repository held.
	// +optional
	Snapshots int32 `json:"snapshots,omitempty"`
	// Damage says what is damaged (lost blobs, the backups that depend on them, a snapshot list
	// that cannot be read) and what to do; empty when nothing is known to be.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Damage string `json:"damage,omitempty"`
}

// RunProgress is what the mover of a running backup last reported.
type RunProgress struct {
	// Time of the report (the mover reports about every 15 s).
	Time metav1.Time `json:"time"`
	// EstimatedBytes is the size of the volume's files: for an incremental kopia backup, their
	// size at the previous backup; otherwise once the mover has scanned the volume.
	// +optional
	EstimatedBytes int64 `json:"estimatedBytes,omitempty"`
	// HashedBytes were read and hashed; CachedBytes belong to files unchanged since the previous
	// backup, not read again (kopia).
	HashedBytes int64 `json:"hashedBytes"`
	// +optional
	CachedBytes int64 `json:"cachedBytes,omitempty"`
	// UploadedBytes were written to the bucket.
	UploadedBytes int64 `json:"uploadedBytes"`
}

// ActiveRun is the backup currently running.
type ActiveRun struct {
	// ID of the run, also the name of its Job and temporary objects.
	ID string `json:"id"`
	// ScheduledTime the run stands for (the trigger time for manual runs).
	ScheduledTime metav1.Time `json:"scheduledTime"`
	// StartTime is when the operator started the run.
	StartTime metav1.Time `json:"startTime"`
	// Manual is true for a run started by trigger.manual.
	// +optional
	Manual bool `json:"manual,omitempty"`
	// Engine of the run, decided when it started (empty: Archive, a run of an older operator).
	// +optional
	Engine BackupEngine `json:"engine,omitempty"`
	// Progress of the upload, as the mover last reported it.
	// +optional
	Progress *RunProgress `json:"progress,omitempty"`
	// Hooks of the run: which ran, with what result (spec.hooks).
	// +optional
	Hooks *RunHooks `json:"hooks,omitempty"`
	// PVCs are the members of a group backup (spec.group), resolved once when the run started;
	// empty for the backup of one PVC (spec.pvcName).
	// +kubebuilder:validation:MaxItems=16
	// +optional
	PVCs []string `json:"pvcs,omitempty"`
	// VolumeGroupSnapshotClass is set when the run captures its group with one CSI
	// VolumeGroupSnapshot of this class (every member cut at once) instead of one VolumeSnapshot
	// per member; decided when the run started.
	// +optional
	VolumeGroupSnapshotClass string `json:"volumeGroupSnapshotClass,omitempty"`
}

// HookPhase is when a hook runs: Before or After.
type HookPhase string

// Hook phases.
const (
	HookBefore HookPhase = "Before"
	HookAfter  HookPhase = "After"
)

// HookResult is what one hook did in one pod.
type HookResult struct {
	// Phase and Index name the hook: spec.hooks.before[index] or spec.hooks.after[index].
	Phase HookPhase `json:"phase"`
	Index int32     `json:"index"`
	// Pod and Container the command ran in (empty when no pod matched).
	// +optional
	Pod string `json:"pod,omitempty"`
	// +optional
	Container string `json:"container,omitempty"`
	// ExitCode of the command, when it ended by itself.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// Duration of the exec, e.g. "1.2s".
	// +optional
	Duration string `json:"duration,omitempty"`
	// Reason of a failure: HookFailed, HookTimedOut, HookPodNotFound, HookExecFailed; empty
	// when the command exited 0.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says what happened, for a failure what to do.
	// +optional
	Message string `json:"message,omitempty"`
	// Output is the tail of the command's stdout and stderr (at most 1 KiB, the start cut off
	// and marked); kept for the last run only. Never print secrets from a hook: this is status.
	// +optional
	Output string `json:"output,omitempty"`
}

// RunHooks is how far the active run got with its hooks; what survives a restart of the
// manager (docs/application-backups.md, "What is guaranteed").
type RunHooks struct {
	// Session is the manager process that may run this run's hooks: a manager that finds
	// another's session and no recorded before-hooks knows they may have run partly.
	Session string `json:"session"`
	// BeforeDone is set once the before-hooks' results are recorded.
	// +optional
	BeforeDone bool `json:"beforeDone,omitempty"`
	// AfterDone is set once the after-hooks' results are recorded.
	// +optional
	AfterDone bool `json:"afterDone,omitempty"`
	// Results of the hooks that ran so far, in order; at most 64: beyond, the successful ones
	// are dropped first.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Results []HookResult `json:"results,omitempty"`
}

// RunStatus is the record of one finished backup run.
type RunStatus struct {
	// ID of the run.
	ID string `json:"id"`
	// ScheduledTime the run stood for.
	ScheduledTime metav1.Time `json:"scheduledTime"`
	// StartTime and CompletionTime of the run.
	StartTime      metav1.Time `json:"startTime"`
	CompletionTime metav1.Time `json:"completionTime"`
	// Duration of the run, e.g. "1m30s".
	Duration string `json:"duration,omitempty"`
	// Result of the run.
	Result RunResult `json:"result"`
	// Reason of a failure, e.g. DeadlineExceeded, StorageFailed, StorageStalled, VolumeReadFailed,
	// MoverKilled.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message explains a failure.
	// +optional
	Message string `json:"message,omitempty"`
	// ObjectKey of the archive in the bucket, or of the manifest of a kopia backup.
	// +optional
	ObjectKey string `json:"objectKey,omitempty"`
	// Engine that stored the backup.
	// +optional
	Engine BackupEngine `json:"engine,omitempty"`
	// SnapshotID of a kopia backup.
	// +optional
	SnapshotID string `json:"snapshotID,omitempty"`
	// Bytes of the compressed archive.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// ContentBytes of file data backed up (uncompressed).
	// +optional
	ContentBytes int64 `json:"contentBytes,omitempty"`
	// Files backed up.
	// +optional
	Files int64 `json:"files,omitempty"`
	// SkippedEntries counts what the volume held and the engine could not keep: sockets and
	// devices, and FIFOs with kopia (a Warning event EntriesSkipped says so).
	// +optional
	SkippedEntries int64 `json:"skippedEntries,omitempty"`
	// SHA256 of the archive object.
	// +optional
	SHA256 string `json:"sha256,omitempty"`
	// Manual is true for a run started by trigger.manual.
	// +optional
	Manual bool `json:"manual,omitempty"`
	// Verified is the result of spec.verify for this backup: true when the archive read back from
	// S3 matched its manifest. Unset when not verified.
	// +optional
	Verified *bool `json:"verified,omitempty"`
	// VerificationMessage explains a failed verification.
	// +optional
	VerificationMessage string `json:"verificationMessage,omitempty"`
	// Hooks are the results of the run's hooks (spec.hooks), at most 64 (failures kept first);
	// output tails and messages only in lastRun and the newest history entry.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Hooks []HookResult `json:"hooks,omitempty"`
	// PVCs are the members of a group backup (spec.group); empty for the backup of one PVC.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	PVCs []string `json:"pvcs,omitempty"`
	// VolumeGroupSnapshotClass is set when the run captured its group with one CSI
	// VolumeGroupSnapshot of this class: the members were cut at once (crash-consistent across
	// the group).
	// +optional
	VolumeGroupSnapshotClass string `json:"volumeGroupSnapshotClass,omitempty"`
}

// PVCBackupStatus is what the operator observed. It never holds intent.
type PVCBackupStatus struct {
	// ObservedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastBackup is when the last successful backup completed (RFC3339).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Last Backup",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=1
	LastBackup string `json:"lastBackup,omitempty"`
	// NextBackup is when the next scheduled backup is due (RFC3339).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Next Backup",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=2
	NextBackup string `json:"nextBackup,omitempty"`
	// LastScheduleTime is the latest scheduled time already handled (run, missed, skipped, or passed
	// while suspended): the scheduler's only state.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// LastManualTrigger is the last trigger.manual value a run was started for.
	// +optional
	LastManualTrigger string `json:"lastManualTrigger,omitempty"`
	// ActiveRun is the run in progress, if any.
	// +optional
	ActiveRun *ActiveRun `json:"activeRun,omitempty"`
	// LastRun is the last finished run.
	// +optional
	LastRun *RunStatus `json:"lastRun,omitempty"`
	// History of the last finished runs, newest first (at most 10).
	// +optional
	// +kubebuilder:validation:MaxItems=10
	History []RunStatus `json:"history,omitempty"`
	// Backups lists the restorable backups in the bucket, newest first (at most 50), as seen after
	// the last run and its pruning: only complete backups (manifest and archive of the declared
	// size; for kopia, a manifest whose snapshot the last run found intact in the repository)
	// are listed and counted by the retention rules.
	// +optional
	// +kubebuilder:validation:MaxItems=50
	Backups []BackupRef `json:"backups,omitempty"`
	// BrokenBackups lists objects under this PVCBackup's prefix that look like backups but are not
	// usable (a manifest that does not decode or is dated in the future, an archive missing or of
	// the wrong size, a kopia snapshot the repository does not hold or that lost data, a kopia
	// manifest no run has checked against the repository yet). They are
	// neither restored as "latest" nor counted by retention, and never deleted by it: inspect and
	// remove them by hand (at most 20 listed).
	// +optional
	// +kubebuilder:validation:MaxItems=20
	BrokenBackups []BrokenBackup `json:"brokenBackups,omitempty"`
	// Engine the next backup will use: spec.engine, or what the prefix holds when it is empty.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Engine",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=3
	Engine BackupEngine `json:"engine,omitempty"`
	// Repository is the state of the kopia repository, as the last kopia run found it.
	// +optional
	Repository *RepositoryStatus `json:"repository,omitempty"`
	// MissedSchedules counts scheduled times that never ran (operator down past the deadline, or
	// more than one tick missed: only the latest is caught up).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Missed Schedules",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=4
	MissedSchedules int64 `json:"missedSchedules,omitempty"`
	// SkippedSchedules counts scheduled times that came while a run was still going.
	// +optional
	SkippedSchedules int64 `json:"skippedSchedules,omitempty"`
	// Conditions are Ready, Running, RepositoryHealthy (kopia engine) and, when deletion
	// fails, DeletionFailed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Conditions",xDescriptors={"urn:alm:descriptor:io.kubernetes.conditions"},order=5
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PVCBackup backs a PersistentVolumeClaim up to S3 on a cron schedule.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pvcb,categories=okgoes
// +kubebuilder:printcolumn:name="PVC",type=string,JSONPath=`.spec.pvcName`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Last",type=string,JSONPath=`.status.lastBackup`
// +kubebuilder:printcolumn:name="Next",type=string,JSONPath=`.status.nextBackup`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +operator-sdk:csv:customresourcedefinitions:displayName="PVC Backup",resources={{Job,v1},{PersistentVolumeClaim,v1},{VolumeSnapshot,v1}}
type PVCBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired backup schedule.
	Spec PVCBackupSpec `json:"spec"`
	// Status is what the operator observed.
	Status PVCBackupStatus `json:"status,omitempty"`
}

// PVCBackupList is a list of PVCBackup.
// +kubebuilder:object:root=true
type PVCBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PVCBackup `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PVCBackup{}, &PVCBackupList{})
}
