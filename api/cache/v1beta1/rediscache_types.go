package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
)

// v1beta1 differs from v1alpha1 in two ways (docs/upgrades.md):
//   - everything that configures the Redis server itself (image, pull policy, port, memory and
//     eviction, auth) is grouped under spec.redis, so the top level of the spec is about the pods;
//   - spec.redis.maxClients (Redis maxclients) is new.
// Both versions are served; the conversion webhook converts losslessly between them (v1beta1 is
// the hub, see conversion.go in v1alpha1).

// EvictionPolicy is a Redis maxmemory-policy: what Redis evicts once maxmemory is reached. One of
// noeviction, allkeys-lru, allkeys-lfu, allkeys-random, volatile-lru, volatile-lfu, volatile-random,
// volatile-ttl.
//
// The values are checked by a CEL rule, not an OpenAPI enum: an enum violation is one of the
// errors after which the API server skips every CEL rule of the object and appends "some
// validation rules were not checked" to the message.
// +kubebuilder:validation:XValidation:rule="self in ['noeviction', 'allkeys-lru', 'allkeys-lfu', 'allkeys-random', 'volatile-lru', 'volatile-lfu', 'volatile-random', 'volatile-ttl']",message="must be a Redis maxmemory-policy: noeviction, allkeys-lru, allkeys-lfu, allkeys-random, volatile-lru, volatile-lfu, volatile-random or volatile-ttl"
type EvictionPolicy string

// The eight maxmemory policies Redis understands.
const (
	EvictionNoEviction     EvictionPolicy = "noeviction"
	EvictionAllKeysLRU     EvictionPolicy = "allkeys-lru"
	EvictionAllKeysLFU     EvictionPolicy = "allkeys-lfu"
	EvictionAllKeysRandom  EvictionPolicy = "allkeys-random"
	EvictionVolatileLRU    EvictionPolicy = "volatile-lru"
	EvictionVolatileLFU    EvictionPolicy = "volatile-lfu"
	EvictionVolatileRandom EvictionPolicy = "volatile-random"
	EvictionVolatileTTL    EvictionPolicy = "volatile-ttl"
)

// DefaultImage is the Redis image used when spec.redis.image is empty.
const DefaultImage = "docker.io/library/redis:7.4-alpine"

// ImageReferencePattern is the grammar of a container image reference (that of
// github.com/distribution/reference, which the kubelet parses images with): an optional registry
// host[:port]/, a lower-case repository path, an optional :tag and an optional @digest. It is
// written without backslashes so that it can stand unchanged in a CEL string literal: the CEL rule
// on spec.redis.image (spec.image in v1alpha1) is this pattern, which a test of the generated CRD
// checks, and the controller applies it to objects stored before the rule existed.
const ImageReferencePattern = `^(?:(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:[.](?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|[[][a-fA-F0-9:]+[]])(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*)*(?::[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$`

// RedisCacheSpec is the cache the user asks for. It holds intent only; observations live in
// RedisCacheStatus.
//
// redis.memory.maxMemory <= resources.limits.memory is checked by the controller (InvalidSpec), not
// by CEL: the API server's cost estimator rejects any rule reading the unbounded quantity strings
// of corev1.ResourceRequirements.
// +kubebuilder:validation:XValidation:rule="(has(oldSelf.mode) ? oldSelf.mode : 'Standalone') == (has(self.mode) ? self.mode : 'Standalone')",message="spec.mode cannot be changed: create a new RedisCache in the other mode and move the clients (docs/rediscache.md, Migration)"
// +kubebuilder:validation:XValidation:rule="!has(self.persistence) || (has(self.mode) && self.mode == 'Replication')",message="spec.persistence needs mode Replication (with replicas 1 for a single instance): a Deployment's pods cannot each keep a volume of their own"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.persistence) == has(self.persistence)",message="spec.persistence cannot be added or removed after creation: the pods' volume claims are fixed when the StatefulSet is made"
// +kubebuilder:validation:XValidation:rule="!has(self.persistence) || !has(self.redis) || !has(self.redis.memory) || !has(self.redis.memory.maxMemory) || quantity(string(self.persistence.size)).compareTo(quantity(string(self.redis.memory.maxMemory)).add(quantity(string(self.redis.memory.maxMemory)))) >= 0",message="spec.persistence.size must be at least twice spec.redis.memory.maxMemory: Redis writes a second copy of its dataset while it rewrites the snapshot (or append-only file); raise the size (a new RedisCache: persistence is fixed at creation) or lower maxMemory"
// +kubebuilder:validation:XValidation:rule="!has(self.backup) || has(self.persistence)",message="spec.backup needs spec.persistence: a cache without persistence keeps no data on a volume to back up"
// +kubebuilder:validation:XValidation:rule="!has(self.restoreFrom) || has(self.persistence)",message="spec.restoreFrom needs spec.persistence: the backup is restored into the volume of the first pod"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.restoreFrom) == has(self.restoreFrom)",message="spec.restoreFrom cannot be added or removed after creation: a backup is restored only into a new RedisCache, before its first pod starts"
type RedisCacheSpec struct {
	// Mode is how the Redis pods relate to each other. Standalone (the default, and the behaviour
	// of every RedisCache created before this field existed): each pod is an independent cache
	// behind one Service; with replicas 1 that is a single instance. Replication: one primary and
	// replicas-1 read replicas of it, with failover driven by the operator; the Service <name>
	// reaches the primary, <name>-replicas the replicas. Cannot be changed after creation.
	// +kubebuilder:default=Standalone
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Mode",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Standalone","urn:alm:descriptor:com.tectonic.ui:select:Replication"},order=0
	Mode Mode `json:"mode,omitempty"`

	// Persistence keeps each Redis pod's data on a PersistentVolumeClaim of its own, so that a
	// pod that restarts (or every pod at once) starts warm from its RDB snapshot or append-only
	// file instead of empty. Replication mode only; fixed at creation. Without it the cache is
	// in memory only.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Persistence",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:fieldDependency:mode:Replication"},order=7
	Persistence *Persistence `json:"persistence,omitempty"`

	// Backup backs up the data of the cache on a schedule into S3 (persistence only): the
	// operator owns a PVCBackup <name>-backup for it and starts each of its runs itself, after a
	// BGSAVE it waited for on the pod whose volume is copied (docs/rediscache.md, Backup and
	// restore). Removing it deletes the PVCBackup; its backups stay in the bucket unless
	// deletionPolicy is Delete.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Backup",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:fieldDependency:mode:Replication"},order=8
	Backup *Backup `json:"backup,omitempty"`

	// RestoreFrom creates the cache from a backup (persistence only; set at creation, immutable):
	// the backup's RDB snapshot is restored into the volume of the first pod before the
	// StatefulSet exists, so no pod serves before the restore is complete; the other pods
	// resync from it. Used once: status.restore records the restore, and the field is ignored
	// after it succeeded. source.pvcBackup names a PVCBackup in this namespace; source.s3 finds
	// the backups of a PVCBackup that no longer exists (e.g. <old cache>-backup, deleted with
	// its cache) in its bucket.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Restore From",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"},order=9
	RestoreFrom *RestoreFrom `json:"restoreFrom,omitempty"`

	// Replication tunes Replication mode; ignored in Standalone mode.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Replication",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:fieldDependency:mode:Replication"},order=6
	Replication *Replication `json:"replication,omitempty"`

	// Replicas is the number of Redis pods: in Standalone mode independent caches behind one
	// Service, in Replication mode one primary and replicas-1 replicas. 0 scales the cache down
	// while keeping its configuration.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Replicas",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:podCount"},order=1
	Replicas *int32 `json:"replicas,omitempty"`

	// Redis configures the Redis server: image, port, memory and eviction, clients and auth.
	// +kubebuilder:default={}
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Redis",order=2
	Redis Redis `json:"redis,omitempty"`

	// Resources of the Redis container. Setting limits.memory is recommended; redis.memory.maxMemory
	// must fit inside it.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Resources",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:resourceRequirements"},order=3
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// PodDisruptionBudget limits voluntary disruptions (node drains) when there is more than one
	// replica. A PodDisruptionBudget is created only while replicas > 1.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Pod Disruption Budget",order=4
	PodDisruptionBudget *PodDisruptionBudget `json:"podDisruptionBudget,omitempty"`

	// NodeSelector constrains the Redis pods to nodes with these labels.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Node Selector",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"},order=5
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations of the Redis pods.
	// +optional
	// +listType=atomic
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Tolerations",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"},order=5
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Affinity of the Redis pods.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Affinity",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"},order=5
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
}

// Mode is how the pods of a RedisCache relate to each other: Standalone or Replication.
// A CEL rule, not an enum (see EvictionPolicy).
// MaxLength bounds the cost of the CEL rules that read it.
// +kubebuilder:validation:XValidation:rule="self in ['Standalone', 'Replication']",message="must be Standalone or Replication"
// +kubebuilder:validation:MaxLength=16
type Mode string

// The modes of a RedisCache.
const (
	// ModeStandalone: every pod is an independent cache (a Deployment behind one Service).
	ModeStandalone Mode = "Standalone"
	// ModeReplication: one primary, the other pods replicate it (a StatefulSet; the operator
	// elects the primary and fails over).
	ModeReplication Mode = "Replication"
)

// Replication tunes the primary/replica mode.
type Replication struct {
	// FailoverAfterSeconds is how long a primary that still exists but is not ready or does not
	// answer the operator (which pings it every second) is waited for before a replica is
	// promoted. A primary pod that is deleted, or whose Redis restarted (and so lost its data), is
	// replaced at once. The default, 5, rides out the pauses of a healthy Redis (a fork for a
	// snapshot, a slow command) and keeps the write outage of a hung or cut-off primary under
	// 10 s (see docs/rediscache.md). A value stored before (the CRD defaulted 10 into every
	// spec.replication until 0.5.0) is kept.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Failover After (seconds)",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number","urn:alm:descriptor:com.tectonic.ui:fieldDependency:mode:Replication"}
	FailoverAfterSeconds *int32 `json:"failoverAfterSeconds,omitempty"`

	// MinReplicasToWrite is Redis's min-replicas-to-write on the primary: it refuses writes
	// (NOREPLICAS) while fewer replicas than this have acknowledged the replication stream within
	// MinReplicasMaxLagSeconds. A primary cut off from its replicas so stops taking writes that a
	// failover would throw away; the price is that writes also stop when no replica is in sync
	// (e.g. the only replica of a 2-pod cache restarts). Default 1 with 2 or more pods; 0 turns
	// it off; capped at replicas-1, so a scale-down never leaves a primary that refuses every
	// write. Applied live (CONFIG SET): changing it restarts no pod.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Min Replicas To Write",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number","urn:alm:descriptor:com.tectonic.ui:fieldDependency:mode:Replication"}
	MinReplicasToWrite *int32 `json:"minReplicasToWrite,omitempty"`

	// MinReplicasMaxLagSeconds is Redis's min-replicas-max-lag: how long a replica may go without
	// acknowledging (replicas do every second) and still count for MinReplicasToWrite. It bounds
	// the writes a cut-off primary still acknowledges, and then loses in the failover, to about
	// this many seconds of writes (plus up to 2 s: Redis counts its replicas once a second).
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Min Replicas Max Lag (seconds)",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number","urn:alm:descriptor:com.tectonic.ui:fieldDependency:mode:Replication"}
	MinReplicasMaxLagSeconds *int32 `json:"minReplicasMaxLagSeconds,omitempty"`
}

// Persistence is where and how a RedisCache keeps its data across restarts.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.persistence cannot be changed after creation: the pods' volume claims are fixed when the StatefulSet is made"
type Persistence struct {
	// Size of each pod's PersistentVolumeClaim. Redis needs room for its dataset plus a second
	// copy while it rewrites the snapshot (or append-only file): at least twice maxMemory
	// (checked at admission). XIntOrString and MaxLength as MaxMemory's, for the CEL rule's cost.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=32
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Size",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Size resource.Quantity `json:"size"`

	// StorageClassName of the claims; empty uses the cluster's default StorageClass.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Storage Class",xDescriptors={"urn:alm:descriptor:io.kubernetes:StorageClass"}
	StorageClassName *string `json:"storageClassName,omitempty"`

	// AppendOnly adds the append-only file (fsync every second: at most about a second of
	// acknowledged writes is lost on a crash) to the RDB snapshots, which are taken after
	// 1 change in an hour, 100 in 5 minutes or 10000 in a minute.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Append-Only File",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:booleanSwitch"}
	AppendOnly bool `json:"appendOnly,omitempty"`

	// ReclaimPolicy is what becomes of the claims when the RedisCache is deleted: Retain (the
	// default: delete them yourself once you no longer need the data) or Delete. Claims of pods
	// removed by a scale-down are always retained and reused by a later scale-up.
	// +kubebuilder:default=Retain
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Reclaim Policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Retain","urn:alm:descriptor:com.tectonic.ui:select:Delete"}
	ReclaimPolicy ReclaimPolicy `json:"reclaimPolicy,omitempty"`
}

// Backup is the backup of a persistent RedisCache: when, where, how long the backups are kept.
// The fields mean what the PVCBackup fields of the same names mean (api/storage/v1).
// +kubebuilder:validation:XValidation:rule="!has(self.kopia) || !has(self.engine) || self.engine != 'Archive'",message="kopia options apply to the Kopia engine only: remove spec.backup.kopia or set spec.backup.engine to Kopia"
type Backup struct {
	// Schedule in cron format: five fields ("0 2 * * *"), a descriptor (@hourly, @daily,
	// @every 6h), optionally prefixed with CRON_TZ=<IANA zone>. Each tick starts a BGSAVE, then
	// the copy of the saved data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^((CRON_TZ|TZ)=[A-Za-z0-9_+/-]+ +)?(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|@every +[0-9a-z.]+|[^ ]+( +[^ ]+){4})$')",message="schedule must be five cron fields or a descriptor such as @daily or @every 6h, optionally prefixed with CRON_TZ=<zone>"
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Schedule",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Schedule string `json:"schedule"`

	// Trigger starts one backup (BGSAVE, then copy) each time trigger.manual is set to a new value.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Trigger",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	Trigger *BackupTrigger `json:"trigger,omitempty"`

	// S3Bucket is the bucket the backups are written to (PVCBackup spec.s3Bucket; the same
	// bucket naming rules). It must exist.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="size(self) >= 3 && size(self) <= 63",message="a bucket name must be 3 to 63 characters long"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9.-]*$')",message="a bucket name may contain only lowercase letters, digits, dots (.) and hyphens (-)"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9](.*[a-z0-9])?$')",message="a bucket name must begin and end with a lowercase letter or a digit"
	// +kubebuilder:validation:XValidation:rule="!self.contains('..')",message="a bucket name must not contain two adjacent dots (..)"
	// +kubebuilder:validation:XValidation:rule="!self.contains('.-') && !self.contains('-.')",message="in a bucket name a dot must not be next to a hyphen (.- or -.)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+){3}$')",message="a bucket name must not be formatted as an IP address"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('xn--')",message="a bucket name must not start with xn--"
	// +kubebuilder:validation:XValidation:rule="!self.endsWith('-s3alias') && !self.endsWith('--ol-s3')",message="a bucket name must not end with -s3alias or --ol-s3 (reserved for access point aliases)"
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="S3 Bucket",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	S3Bucket string `json:"s3Bucket"`

	// S3 is the endpoint, key prefix and credentials Secret (in this namespace). The backups are
	// under <prefix><namespace>/<name>-backup/ in the bucket.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="S3"
	S3 storagev1.S3Location `json:"s3"`

	// Engine: Kopia (empty: the default) or Archive, as PVCBackup spec.engine.
	// +kubebuilder:validation:Enum=Kopia;Archive
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Engine",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Kopia","urn:alm:descriptor:com.tectonic.ui:select:Archive"}
	Engine storagev1.BackupEngine `json:"engine,omitempty"`

	// Kopia tunes the kopia repository (engine Kopia), as PVCBackup spec.kopia.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Kopia",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	Kopia *storagev1.KopiaOptions `json:"kopia,omitempty"`

	// Retention prunes old backups after each successful one, as PVCBackup spec.retention.
	// Unset keeps every backup.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Retention"
	Retention *storagev1.Retention `json:"retention,omitempty"`

	// Verify reads each new backup back and checks it, as PVCBackup spec.verify.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Verify",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:booleanSwitch"}
	Verify bool `json:"verify,omitempty"`

	// Snapshot copies a CSI VolumeSnapshot of the volume instead of the volume itself, as
	// PVCBackup spec.snapshot (needed when the volume cannot be mounted by a second pod).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Snapshot",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	Snapshot *storagev1.SnapshotOptions `json:"snapshot,omitempty"`

	// DeletionPolicy says what becomes of the backups in the bucket when the PVCBackup goes (with
	// the RedisCache, or when spec.backup is removed): Retain (the default) keeps them, so that a
	// deleted cache can be restored; Delete removes them.
	// +kubebuilder:default=Retain
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Deletion Policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Retain","urn:alm:descriptor:com.tectonic.ui:select:Delete"}
	DeletionPolicy storagev1.DeletionPolicy `json:"deletionPolicy,omitempty"`
}

// BackupTrigger requests a backup outside the schedule.
type BackupTrigger struct {
	// Manual starts one backup each time it is set to a new value (e.g. a date or a counter).
	// +kubebuilder:validation:MaxLength=100
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Manual Trigger",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Manual string `json:"manual,omitempty"`
}

// RestoreFrom is the backup a new RedisCache starts from.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.restoreFrom cannot be changed: a backup is restored only into a new RedisCache, before its first pod starts"
type RestoreFrom struct {
	// Source names the backup: source.pvcBackup (a PVCBackup in this namespace, e.g. the
	// <cache>-backup of another RedisCache) or source.s3 (bucket, location, and the namespace
	// and name of the PVCBackup that wrote it), and source.backupID (an id, or latest).
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Source"
	Source storagev1.RestoreSource `json:"source"`
}

// ReclaimPolicy is what becomes of a RedisCache's volume claims when it is deleted.
// +kubebuilder:validation:XValidation:rule="self in ['Retain', 'Delete']",message="must be Retain or Delete"
// +kubebuilder:validation:MaxLength=16
type ReclaimPolicy string

// The reclaim policies.
const (
	ReclaimRetain ReclaimPolicy = "Retain"
	ReclaimDelete ReclaimPolicy = "Delete"
)

// Redis is the configuration of the Redis server.
type Redis struct {
	// Image is the Redis container image: [registry[:port]/]repository[:tag][@digest], the
	// repository in lower case. It must run redis-server as a non-root user and contain sh and
	// redis-cli (used by the readiness probe).
	// +kubebuilder:default="docker.io/library/redis:7.4-alpine"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^(?:(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:[.](?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|[[][a-fA-F0-9:]+[]])(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*)*(?::[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$')",message="must be an image reference, [registry[:port]/]repository[:tag][@digest] with the repository in lower case, e.g. docker.io/library/redis:7.4-alpine"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Image",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Image string `json:"image,omitempty"`

	// ImagePullPolicy of the Redis container: Always, IfNotPresent or Never. Empty means the
	// Kubernetes default for the image tag.
	// +kubebuilder:validation:XValidation:rule="self in ['Always', 'IfNotPresent', 'Never']",message="must be Always, IfNotPresent or Never"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Image Pull Policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:imagePullPolicy"}
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// Port Redis listens on, in the pod and on the Service. Ports below 1024 would need a
	// capability the restricted Pod Security Standard forbids.
	// +kubebuilder:default=6379
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=65535
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Port",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"}
	Port int32 `json:"port,omitempty"`

	// Memory sets how much memory Redis may use for data and what it evicts beyond that.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Memory"
	Memory *Memory `json:"memory,omitempty"`

	// MaxClients is the Redis maxclients: the most client connections one pod accepts. Empty
	// means the Redis default (10000). New in v1beta1; kept in an annotation when the object is
	// read as v1alpha1.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Max Clients",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"}
	MaxClients *int32 `json:"maxClients,omitempty"`

	// Auth enables password authentication. The password is read by the Redis pods from the
	// referenced Secret; the operator never copies it anywhere.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Auth"
	Auth *Auth `json:"auth,omitempty"`
}

// Memory is the Redis memory limit and eviction policy.
//
// MaxMemory carries XIntOrString so that controller-gen accepts a maxLength on the quantity: without
// it the API server estimates the CEL rule for an unbounded string (cost 629150 instead of 30).
type Memory struct {
	// MaxMemory is the Redis maxmemory: the most memory used for data before the eviction policy
	// applies. Must be at least 1Mi and at most resources.limits.memory. Empty means no Redis limit.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('1Mi')) >= 0",message="maxMemory must be at least 1Mi"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Max Memory",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	MaxMemory *resource.Quantity `json:"maxMemory,omitempty"`

	// EvictionPolicy is the Redis maxmemory-policy: noeviction, allkeys-lru, allkeys-lfu,
	// allkeys-random, volatile-lru, volatile-lfu, volatile-random or volatile-ttl.
	// +kubebuilder:default=allkeys-lru
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Eviction Policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:noeviction","urn:alm:descriptor:com.tectonic.ui:select:allkeys-lru","urn:alm:descriptor:com.tectonic.ui:select:allkeys-lfu","urn:alm:descriptor:com.tectonic.ui:select:allkeys-random","urn:alm:descriptor:com.tectonic.ui:select:volatile-lru","urn:alm:descriptor:com.tectonic.ui:select:volatile-lfu","urn:alm:descriptor:com.tectonic.ui:select:volatile-random","urn:alm:descriptor:com.tectonic.ui:select:volatile-ttl"}
	EvictionPolicy EvictionPolicy `json:"evictionPolicy,omitempty"`
}

// Auth points at the Redis password.
type Auth struct {
	// SecretRef names the Secret (in the RedisCache's namespace) and key holding the password.
	SecretRef SecretKeyReference `json:"secretRef"`
}

// SecretKeyReference is a key of a Secret in the same namespace.
type SecretKeyReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Password Secret",xDescriptors={"urn:alm:descriptor:io.kubernetes:Secret"}
	Name string `json:"name"`

	// Key in the Secret's data.
	// +kubebuilder:default=password
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Password Key",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Key string `json:"key,omitempty"`
}

// PodDisruptionBudget configures the PodDisruptionBudget of a cache with more than one replica.
type PodDisruptionBudget struct {
	// Enabled creates the PodDisruptionBudget while replicas > 1.
	// +kubebuilder:default=true
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Enabled",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:booleanSwitch"}
	Enabled *bool `json:"enabled,omitempty"`

	// MaxUnavailable is how many Redis pods a voluntary disruption may take down at once.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Max Unavailable",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"}
	MaxUnavailable *int32 `json:"maxUnavailable,omitempty"`
}

// Phase summarises the conditions in one word, for humans and printer columns.
// +kubebuilder:validation:Enum=Progressing;Ready;ScaledDown;Degraded
type Phase string

// Phases of a RedisCache.
const (
	// PhaseProgressing: pods are being rolled out, scaled or are not ready yet.
	PhaseProgressing Phase = "Progressing"
	// PhaseReady: every requested replica (at least one) is ready with the current spec.
	PhaseReady Phase = "Ready"
	// PhaseScaledDown: replicas is 0 and no Redis pod is left; the configuration is kept.
	PhaseScaledDown Phase = "ScaledDown"
	// PhaseDegraded: the cache cannot reach its spec without a change by a human (see Degraded).
	PhaseDegraded Phase = "Degraded"
)

// Condition types of a RedisCache.
const (
	// ConditionReady is True (good) when the cache is what the spec asks for: every requested
	// replica is ready with the current spec (reason Available), or replicas is 0 and no pod is
	// left (reason ScaledDown, phase ScaledDown). Ready=True therefore does not promise that a
	// client can connect: with replicas 0 nothing serves, and status.readyReplicas is 0.
	ConditionReady = "Ready"
	// ConditionProgressing is True while a rollout or scale is under way (neither good nor bad).
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True (bad) when the cache cannot reach its spec without a change by a human.
	ConditionDegraded = "Degraded"
	// ConditionRestoring (spec.restoreFrom only) is True while the backup is restored into the
	// first pod's volume (no pod runs yet), False once it is done (reason Restored) or failed
	// (reason RestoreFailed, with Degraded True).
	ConditionRestoring = "Restoring"
	// ConditionPrimaryAvailable (Replication mode only) is True (good) when a primary is elected,
	// ready and answers as a primary; its lastTransitionTime to False is when the operator first
	// saw the primary unavailable, the start of spec.replication.failoverAfterSeconds.
	ConditionPrimaryAvailable = "PrimaryAvailable"
)

// RedisCacheStatus is what the operator observed. It never holds intent. It is the same in
// v1alpha1 and v1beta1.
type RedisCacheStatus struct {
	// ObservedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is a one-word summary of the conditions.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Phase",xDescriptors={"urn:alm:descriptor:io.kubernetes.phase"},order=1
	Phase Phase `json:"phase,omitempty"`

	// Conditions are Ready, Progressing and Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Conditions",xDescriptors={"urn:alm:descriptor:io.kubernetes.conditions"},order=4
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// Replicas is the number of Redis pods that exist, ready or not.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Replicas",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:podCount"},order=2
	Replicas int32 `json:"replicas,omitempty"`

	// ReadyReplicas is the number of Redis pods running the current configuration and ready.
	// Always present once the cache has a status (the API server defaults it to 0), so the
	// Available column of kubectl get shows a number.
	// +kubebuilder:default=0
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Ready Replicas",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:podCount"},order=3
	ReadyReplicas int32 `json:"readyReplicas"`

	// ConfigHash is the hash of the rendered redis.conf the pods run with.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Config Hash",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=5
	ConfigHash string `json:"configHash,omitempty"`

	// Replication is what the operator saw of the replication (Replication mode only).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Replication",order=6
	Replication *ReplicationStatus `json:"replication,omitempty"`

	// Backup is the state of spec.backup: the PVCBackup, the save under way, the last run.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Backup",order=7
	Backup *BackupStatus `json:"backup,omitempty"`

	// Restore is the restore of spec.restoreFrom; once it succeeded, spec.restoreFrom is ignored.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Restore",order=8
	Restore *RestoreStatus `json:"restore,omitempty"`
}

// BackupStatus is what the operator knows of the backups of a cache.
type BackupStatus struct {
	// PVCBackup is the PVCBackup that makes the copies and holds the list of backups
	// (its status.backups).
	PVCBackup string `json:"pvcBackup"`
	// LastScheduleTime is the latest tick of spec.backup.schedule handled (run, or skipped while
	// a backup was under way).
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// LastManualTrigger is the spec.backup.trigger.manual last handled.
	// +optional
	LastManualTrigger string `json:"lastManualTrigger,omitempty"`
	// Save is the BGSAVE the next copy waits for; absent when none is under way.
	// +optional
	Save *BackupSave `json:"save,omitempty"`
	// Pod and PVCName are the pod whose saved data the last copy read, and its claim.
	// +optional
	Pod string `json:"pod,omitempty"`
	// +optional
	PVCName string `json:"pvcName,omitempty"`
	// LastBackup is the id of the newest successful backup (PVCRestore spec.source.backupID).
	// +optional
	LastBackup string `json:"lastBackup,omitempty"`
	// LastBackupTime is when it was taken.
	// +optional
	LastBackupTime *metav1.Time `json:"lastBackupTime,omitempty"`
	// LastRunTime is when the last backup ended (its copy, or its save when that failed).
	// +optional
	LastRunTime *metav1.Time `json:"lastRunTime,omitempty"`
	// LastResult is Succeeded or Failed: the outcome of the last backup, its save or its copy.
	// +optional
	LastResult string `json:"lastResult,omitempty"`
	// LastReason and LastMessage say why the last backup failed (empty when it succeeded).
	// +optional
	LastReason string `json:"lastReason,omitempty"`
	// +optional
	LastMessage string `json:"lastMessage,omitempty"`
}

// BackupSave is a BGSAVE the operator started (or is about to start) for a backup.
type BackupSave struct {
	// Trigger is the token the PVCBackup's spec.trigger.manual is set to once the save is done.
	Trigger string `json:"trigger"`
	// Pod whose Redis saves, and PVCName its claim (the PVCBackup's spec.pvcName for the copy).
	Pod     string `json:"pod"`
	PVCName string `json:"pvcName"`
	// Since is when the operator decided on the save; it gives up after a bound (SaveTimedOut).
	Since metav1.Time `json:"since"`
	// PrimaryOffset is the primary's replication offset when a replica was chosen: the replica
	// saves only once it has applied this much, so the save holds every write the primary
	// acknowledged before.
	// +optional
	PrimaryOffset int64 `json:"primaryOffset,omitempty"`
	// Started is true once Redis accepted the BGSAVE; SavesBefore is its rdb_saves before it.
	// +optional
	Started bool `json:"started,omitempty"`
	// +optional
	SavesBefore int64 `json:"savesBefore,omitempty"`
}

// RestoreStatus is the restore of spec.restoreFrom.
type RestoreStatus struct {
	// PVCRestore is the PVCRestore that writes the first pod's claim.
	PVCRestore string `json:"pvcRestore"`
	// PVCName is the claim restored into (data-<name>-0).
	PVCName string `json:"pvcName"`
	// Phase is the PVCRestore's: Pending, Restoring, Succeeded or Failed.
	// +optional
	Phase storagev1.RestorePhase `json:"phase,omitempty"`
	// BackupID is the backup restored (resolved from latest).
	// +optional
	BackupID string `json:"backupID,omitempty"`
	// CompletionTime is when the restore ended.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// ReplicationStatus is the replication of a RedisCache in Replication mode, as last observed.
// Offsets move all the time (Redis pings its replicas); only whether each replica is in sync is
// kept here, and the lag only while it is not, so a steady cache causes no status writes. The
// exact lag is the metric okgoes_rediscache_replication_lag_bytes.
type ReplicationStatus struct {
	// Primary is the pod that takes writes: the one the Service <name> selects.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Primary",xDescriptors={"urn:alm:descriptor:io.kubernetes:Pod"}
	Primary string `json:"primary,omitempty"`

	// Replicas are the other pods.
	// +optional
	// +listType=map
	// +listMapKey=pod
	Replicas []ReplicaStatus `json:"replicas,omitempty"`

	// LastFailover is the last promotion of a replica by the operator.
	// +optional
	LastFailover *Failover `json:"lastFailover,omitempty"`
}

// ReplicaStatus is one replica as last observed.
type ReplicaStatus struct {
	// Pod is the replica's pod.
	Pod string `json:"pod"`

	// InSync is true when the replica is linked to the primary and at most 1 MiB behind it;
	// only then does the Service <name>-replicas send it readers.
	InSync bool `json:"inSync"`

	// LagBytes is how far the replica is behind the primary's replication offset, reported only
	// while it is not in sync and the operator could read it.
	// +optional
	LagBytes *int64 `json:"lagBytes,omitempty"`
}

// Failover is one promotion of a replica.
type Failover struct {
	// Time the operator promoted the replica.
	Time metav1.Time `json:"time"`
	// From is the primary that was replaced (empty on the first election).
	// +optional
	From string `json:"from,omitempty"`
	// To is the promoted pod.
	To string `json:"to"`
	// Reason is why: PrimaryDeleted, PrimaryRestarted, PrimaryUnavailable, NoPrimary.
	Reason string `json:"reason"`
}

// RedisCache is a Redis cache the operator runs as a ConfigMap, a Deployment (Standalone) or a
// StatefulSet (Replication), its Services and, with more than one replica, a PodDisruptionBudget.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (at most 63 characters, lower case, starting with a letter): it names the Service"
// +kubebuilder:resource:shortName=rc;redis,categories=okgoes
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`,priority=1
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.redis.memory.evictionPolicy`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +operator-sdk:csv:customresourcedefinitions:displayName="Redis Cache",resources={{Deployment,v1},{StatefulSet,v1},{Service,v1},{ConfigMap,v1},{PodDisruptionBudget,v1},{PVCBackup,v1},{PVCRestore,v1}}
type RedisCache struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired cache.
	Spec RedisCacheSpec `json:"spec,omitempty"`
	// Status is the observed state of the cache.
	Status RedisCacheStatus `json:"status,omitempty"`
}

// RedisCacheList is a list of RedisCache.
// +kubebuilder:object:root=true
type RedisCacheList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedisCache `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RedisCache{}, &RedisCacheList{})
}
