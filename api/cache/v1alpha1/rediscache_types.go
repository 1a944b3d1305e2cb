package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/okgoes/okgoes-operator/api/cache/v1beta1"
)

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

// DefaultImage is the Redis image used when spec.image is empty.
const DefaultImage = "docker.io/library/redis:7.4-alpine"

// RedisCacheSpec is the cache the user asks for. It holds intent only; observations live in
// RedisCacheStatus.
//
// eviction.maxMemory <= resources.limits.memory is checked by the controller (InvalidSpec), not
// by CEL: the API server's cost estimator rejects any rule reading the unbounded quantity strings
// of corev1.ResourceRequirements.
type RedisCacheSpec struct {
	// Replicas is the number of Redis pods. Each pod is an independent cache behind one Service;
	// 0 scales the cache down while keeping its configuration.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Replicas",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:podCount"},order=1
	Replicas *int32 `json:"replicas,omitempty"`

	// Image is the Redis container image: [registry[:port]/]repository[:tag][@digest], the
	// repository in lower case. It must run redis-server as a non-root user and contain sh and
	// redis-cli (used by the readiness probe).
	// +kubebuilder:default="docker.io/library/redis:7.4-alpine"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^(?:(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:[.](?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|[[][a-fA-F0-9:]+[]])(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*)*(?::[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$')",message="must be an image reference, [registry[:port]/]repository[:tag][@digest] with the repository in lower case, e.g. docker.io/library/redis:7.4-alpine"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Image",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"},order=2
	Image string `json:"image,omitempty"`

	// ImagePullPolicy of the Redis container: Always, IfNotPresent or Never. Empty means the
	// Kubernetes default for the image tag.
	// +kubebuilder:validation:XValidation:rule="self in ['Always', 'IfNotPresent', 'Never']",message="must be Always, IfNotPresent or Never"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Image Pull Policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:imagePullPolicy"},order=2
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// Port Redis listens on, in the pod and on the Service. Ports below 1024 would need a
	// capability the restricted Pod Security Standard forbids.
	// +kubebuilder:default=6379
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=65535
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Port",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"},order=2
	Port int32 `json:"port,omitempty"`

	// Resources of the Redis container. Setting limits.memory is recommended; eviction.maxMemory
	// must fit inside it.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Resources",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:resourceRequirements"},order=3
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Eviction sets how much memory Redis may use for data and what it evicts beyond that.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Eviction",order=2
	Eviction *Eviction `json:"eviction,omitempty"`

	// Auth enables password authentication. The password is read by the Redis pods from the
	// referenced Secret; the operator never copies it anywhere.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Auth",order=2
	Auth *Auth `json:"auth,omitempty"`

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

// Eviction is the Redis memory limit and eviction policy.
//
// MaxMemory carries XIntOrString so that controller-gen accepts a maxLength on the quantity: without
// it the API server estimates the CEL rule for an unbounded string (cost 629150 instead of 30).
type Eviction struct {
	// Policy is the Redis maxmemory-policy: noeviction, allkeys-lru, allkeys-lfu, allkeys-random,
	// volatile-lru, volatile-lfu, volatile-random or volatile-ttl.
	// +kubebuilder:default=allkeys-lru
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Eviction Policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:noeviction","urn:alm:descriptor:com.tectonic.ui:select:allkeys-lru","urn:alm:descriptor:com.tectonic.ui:select:allkeys-lfu","urn:alm:descriptor:com.tectonic.ui:select:allkeys-random","urn:alm:descriptor:com.tectonic.ui:select:volatile-lru","urn:alm:descriptor:com.tectonic.ui:select:volatile-lfu","urn:alm:descriptor:com.tectonic.ui:select:volatile-random","urn:alm:descriptor:com.tectonic.ui:select:volatile-ttl"}
	Policy EvictionPolicy `json:"policy,omitempty"`

	// MaxMemory is the Redis maxmemory: the most memory used for data before the policy applies.
	// Must be at least 1Mi and at most resources.limits.memory. Empty means no Redis limit.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('1Mi')) >= 0",message="maxMemory must be at least 1Mi"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Max Memory",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	MaxMemory *resource.Quantity `json:"maxMemory,omitempty"`
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
)

// RedisCacheStatus is what the operator observed. It never holds intent.
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

	// Replication is what the operator saw of the replication (Replication mode only; the mode
	// itself is a v1beta1 field, kept in the annotation cache.okgoes.com/v1beta1-fields here).
	// +optional
	Replication *ReplicationStatus `json:"replication,omitempty"`

	// Backup is the state of spec.backup, a v1beta1 field (kept in the annotation
	// cache.okgoes.com/v1beta1-fields here). The type is v1beta1's: the status is the same in
	// both versions.
	// +optional
	Backup *v1beta1.BackupStatus `json:"backup,omitempty"`

	// Restore is the restore of spec.restoreFrom, a v1beta1 field (see Backup).
	// +optional
	Restore *v1beta1.RestoreStatus `json:"restore,omitempty"`
}

// ReplicationStatus is the replication of a RedisCache in Replication mode (as in v1beta1).
type ReplicationStatus struct {
	// Primary is the pod that takes writes: the one the Service <name> selects.
	// +optional
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

// ReplicaStatus is one replica as last observed (as in v1beta1).
type ReplicaStatus struct {
	// Pod is the replica's pod.
	Pod string `json:"pod"`

	// InSync is true when the replica is linked to the primary and at most 1 MiB behind it.
	InSync bool `json:"inSync"`

	// LagBytes is how far the replica is behind the primary, reported only while not in sync.
	// +optional
	LagBytes *int64 `json:"lagBytes,omitempty"`
}

// Failover is one promotion of a replica (as in v1beta1).
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

// RedisCache is a Redis cache the operator runs as a ConfigMap, a Deployment, a Service and,
// with more than one replica, a PodDisruptionBudget.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (at most 63 characters, lower case, starting with a letter): it names the Service"
// +kubebuilder:resource:shortName=rc;redis,categories=okgoes
// +kubebuilder:deprecatedversion:warning="cache.okgoes.com/v1alpha1 RedisCache is deprecated: use cache.okgoes.com/v1beta1, the same cache with the Redis settings under spec.redis (docs/upgrades.md)"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +operator-sdk:csv:customresourcedefinitions:displayName="Redis Cache",resources={{Deployment,v1},{Service,v1},{ConfigMap,v1},{PodDisruptionBudget,v1}}
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
