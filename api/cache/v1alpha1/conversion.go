package v1alpha1

import (
	"encoding/json"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/conversion"

	"github.com/okgoes/okgoes-operator/api/cache/v1beta1"
)

// HubOnlyAnnotation keeps the v1beta1 fields v1alpha1 has no place for (spec.redis.maxClients,
// spec.mode unless Standalone, spec.replication, spec.persistence, spec.backup, spec.restoreFrom) while an object is read or written as v1alpha1, so that a round trip
// through v1alpha1 loses nothing. It is removed again when the object is converted to v1beta1.
const HubOnlyAnnotation = "cache.okgoes.com/v1beta1-fields"

// hubOnly are the v1beta1 fields without a v1alpha1 counterpart, as stored in HubOnlyAnnotation.
// Mode is left out when it is Standalone, the default: the v1alpha1 view of a cache in the
// default mode carries no annotation for it, and converting back gives Standalone.
type hubOnly struct {
	MaxClients  *int32               `json:"maxClients,omitempty"`
	Mode        v1beta1.Mode         `json:"mode,omitempty"`
	Replication *v1beta1.Replication `json:"replication,omitempty"`
	Persistence *v1beta1.Persistence `json:"persistence,omitempty"`
	Backup      *v1beta1.Backup      `json:"backup,omitempty"`
	RestoreFrom *v1beta1.RestoreFrom `json:"restoreFrom,omitempty"`
}

var _ conversion.Convertible = &RedisCache{}

// ConvertTo converts this v1alpha1 RedisCache to the hub version (v1beta1).
func (src *RedisCache) ConvertTo(dstRaw conversion.Hub) error {
	dst, ok := dstRaw.(*v1beta1.RedisCache)
	if !ok {
		return fmt.Errorf("cannot convert RedisCache v1alpha1 to %T", dstRaw)
	}
	src.ObjectMeta.DeepCopyInto(&dst.ObjectMeta)
	s := src.Spec.DeepCopy()
	dst.Spec = v1beta1.RedisCacheSpec{
		Replicas: s.Replicas,
		Redis: v1beta1.Redis{
			Image:           s.Image,
			ImagePullPolicy: s.ImagePullPolicy,
			Port:            s.Port,
		},
		Resources:    s.Resources,
		NodeSelector: s.NodeSelector,
		Tolerations:  s.Tolerations,
		Affinity:     s.Affinity,
	}
	if e := s.Eviction; e != nil {
		dst.Spec.Redis.Memory = &v1beta1.Memory{MaxMemory: e.MaxMemory, EvictionPolicy: v1beta1.EvictionPolicy(e.Policy)}
	}
	if a := s.Auth; a != nil {
		dst.Spec.Redis.Auth = &v1beta1.Auth{SecretRef: v1beta1.SecretKeyReference(a.SecretRef)}
	}
	if p := s.PodDisruptionBudget; p != nil {
		dst.Spec.PodDisruptionBudget = &v1beta1.PodDisruptionBudget{Enabled: p.Enabled, MaxUnavailable: p.MaxUnavailable}
	}
	if raw, ok := dst.Annotations[HubOnlyAnnotation]; ok {
		var h hubOnly
		if err := json.Unmarshal([]byte(raw), &h); err != nil {
			return fmt.Errorf("annotation %s: %w", HubOnlyAnnotation, err)
		}
		dst.Spec.Redis.MaxClients = h.MaxClients
		dst.Spec.Mode = h.Mode
		dst.Spec.Replication = h.Replication
		dst.Spec.Persistence = h.Persistence
		dst.Spec.Backup = h.Backup
		dst.Spec.RestoreFrom = h.RestoreFrom
		delete(dst.Annotations, HubOnlyAnnotation)
		if len(dst.Annotations) == 0 {
			dst.Annotations = nil
		}
	}
	if dst.Spec.Mode == "" {
		dst.Spec.Mode = v1beta1.ModeStandalone
	}
	st := src.Status.DeepCopy()
	dst.Status = v1beta1.RedisCacheStatus{
		ObservedGeneration: st.ObservedGeneration,
		Phase:              v1beta1.Phase(st.Phase),
		Conditions:         st.Conditions,
		Replicas:           st.Replicas,
		ReadyReplicas:      st.ReadyReplicas,
		ConfigHash:         st.ConfigHash,
		Backup:             st.Backup,
		Restore:            st.Restore,
	}
	if r := st.Replication; r != nil {
		dst.Status.Replication = &v1beta1.ReplicationStatus{Primary: r.Primary}
		for _, x := range r.Replicas {
			dst.Status.Replication.Replicas = append(dst.Status.Replication.Replicas, v1beta1.ReplicaStatus(x))
		}
		if f := r.LastFailover; f != nil {
			dst.Status.Replication.LastFailover = (*v1beta1.Failover)(f)
		}
	}
	return nil
}

// ConvertFrom converts the hub version (v1beta1) to this v1alpha1 RedisCache.
func (dst *RedisCache) ConvertFrom(srcRaw conversion.Hub) error {
	src, ok := srcRaw.(*v1beta1.RedisCache)
	if !ok {
		return fmt.Errorf("cannot convert %T to RedisCache v1alpha1", srcRaw)
	}
	src.ObjectMeta.DeepCopyInto(&dst.ObjectMeta)
	s := src.Spec.DeepCopy()
	dst.Spec = RedisCacheSpec{
		Replicas:        s.Replicas,
		Image:           s.Redis.Image,
		ImagePullPolicy: s.Redis.ImagePullPolicy,
		Port:            s.Redis.Port,
		Resources:       s.Resources,
		NodeSelector:    s.NodeSelector,
		Tolerations:     s.Tolerations,
		Affinity:        s.Affinity,
	}
	if m := s.Redis.Memory; m != nil {
		dst.Spec.Eviction = &Eviction{Policy: EvictionPolicy(m.EvictionPolicy), MaxMemory: m.MaxMemory}
	}
	if a := s.Redis.Auth; a != nil {
		dst.Spec.Auth = &Auth{SecretRef: SecretKeyReference(a.SecretRef)}
	}
	if p := s.PodDisruptionBudget; p != nil {
		dst.Spec.PodDisruptionBudget = &PodDisruptionBudget{Enabled: p.Enabled, MaxUnavailable: p.MaxUnavailable}
	}
	h := hubOnly{MaxClients: s.Redis.MaxClients, Replication: s.Replication, Persistence: s.Persistence,
		Backup: s.Backup, RestoreFrom: s.RestoreFrom}
	if s.Mode != v1beta1.ModeStandalone {
		h.Mode = s.Mode
	}
	if h != (hubOnly{}) {
		raw, err := json.Marshal(h)
		if err != nil {
			return err
		}
		if dst.Annotations == nil {
			dst.Annotations = map[string]string{}
		}
		dst.Annotations[HubOnlyAnnotation] = string(raw)
	}
	st := src.Status.DeepCopy()
	dst.Status = RedisCacheStatus{
		ObservedGeneration: st.ObservedGeneration,
		Phase:              Phase(st.Phase),
		Conditions:         st.Conditions,
		Replicas:           st.Replicas,
		ReadyReplicas:      st.ReadyReplicas,
		ConfigHash:         st.ConfigHash,
		Backup:             st.Backup,
		Restore:            st.Restore,
	}
	if r := st.Replication; r != nil {
		dst.Status.Replication = &ReplicationStatus{Primary: r.Primary}
		for _, x := range r.Replicas {
			dst.Status.Replication.Replicas = append(dst.Status.Replication.Replicas, ReplicaStatus(x))
		}
		if f := r.LastFailover; f != nil {
			dst.Status.Replication.LastFailover = (*Failover)(f)
		}
	}
	return nil
}
