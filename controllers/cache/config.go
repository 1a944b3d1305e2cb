package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	"github.com/okgoes/okgoes-operator/internal/schedule"
)

// redisConfKey is the ConfigMap key (and file name in the pod) of the rendered configuration.
const redisConfKey = "redis.conf"

// renderRedisConf renders the redis.conf a RedisCache asks for. The output depends only on the
// spec, is byte-for-byte stable for the same spec, and never contains the password: that reaches
// redis-server from the Secret as an environment variable.
func renderRedisConf(spec cachev1beta1.RedisCacheSpec) string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("# Rendered by okgoes-operator from the RedisCache spec; edits here are overwritten.")
	line("port %d", spec.Redis.Port)
	line("bind * -::*")
	line("protected-mode no")
	line("dir /data")
	if p := spec.Persistence; p != nil {
		// /data is the pod's own claim: a restarted pod loads its snapshot (and append-only
		// file) and starts warm. In Replication mode it still starts fenced, as a replica, and
		// the operator elects the most up-to-date pod.
		line("save 3600 1 300 100 60 10000")
		if p.AppendOnly {
			line("appendonly yes")
			line("appendfsync everysec")
		} else {
			line("appendonly no")
		}
	} else {
		// A cache: no persistence, so a restarted pod starts empty instead of replaying a stale dump.
		line(`save ""`)
		line("appendonly no")
	}
	if m := spec.Redis.Memory; m != nil {
		if m.MaxMemory != nil {
			line("maxmemory %d", m.MaxMemory.Value())
		}
		policy := m.EvictionPolicy
		if policy == "" {
			policy = cachev1beta1.EvictionAllKeysLRU
		}
		line("maxmemory-policy %s", policy)
	}
	// Lines for fields added after v1alpha1 come last and only when set, so the configuration of
	// an existing cache (and its hash) does not change when the operator is upgraded.
	if n := spec.Redis.MaxClients; n != nil {
		line("maxclients %d", *n)
	}
	if isReplication(spec) {
		// Every pod starts as a read-only replica of an address where nothing listens: a pod
		// that starts or restarts (and so lost its data) never takes writes until the operator
		// makes it the primary, and a former primary that comes back is fenced until the
		// operator points it at the current one (REPLICAOF changes live in memory only).
		line("replicaof %s %d", fenceHost, fencePort)
		line("replica-read-only yes")
		line("replica-serve-stale-data yes")
		line("repl-diskless-sync yes")
	}
	return b.String()
}

// isReplication tells whether spec asks for Replication mode (an empty mode is Standalone).
func isReplication(spec cachev1beta1.RedisCacheSpec) bool {
	return spec.Mode == cachev1beta1.ModeReplication
}

// configHash identifies a rendered configuration. It is stamped on the pod template so that a
// change of configuration, and only that, rolls the pods.
func configHash(conf string) string {
	sum := sha256.Sum256([]byte(conf))
	return hex.EncodeToString(sum[:])[:16]
}

// imageReference is the grammar of spec.redis.image, as the CRD checks it at admission.
var imageReference = regexp.MustCompile(cachev1beta1.ImageReferencePattern)

// validateSpec checks the rules the CRD schema cannot express, and the image again: a RedisCache
// stored before the image rule existed keeps its image through updates (the API server ratchets
// rules on unchanged fields), and a Deployment with such an image would only fail on the node.
// Its errors are InvalidSpec: the user must change the spec.
func validateSpec(spec cachev1beta1.RedisCacheSpec) error {
	if img := spec.Redis.Image; img != "" && !imageReference.MatchString(img) {
		return fmt.Errorf("image %q (spec.redis.image in v1beta1, spec.image in v1alpha1) is not an image reference: [registry[:port]/]repository[:tag][@digest] with the repository in lower case, e.g. %s",
			img, cachev1beta1.DefaultImage)
	}
	if m := spec.Redis.Memory; m != nil && m.MaxMemory != nil {
		if limit, ok := spec.Resources.Limits[corev1.ResourceMemory]; ok && m.MaxMemory.Cmp(limit) > 0 {
			return fmt.Errorf("maxMemory (%s; spec.redis.memory in v1beta1, spec.eviction in v1alpha1) exceeds spec.resources.limits.memory (%s): Redis would be OOM-killed before it evicts",
				m.MaxMemory.String(), limit.String())
		}
		// Admission checks it for v1beta1 writes; this catches a RedisCache stored before the
		// rule existed, and a maxMemory raised through v1alpha1 (which has no persistence field).
		if p := spec.Persistence; p != nil {
			if need := m.MaxMemory.Value() * 2; p.Size.Value() < need {
				return fmt.Errorf("spec.persistence.size (%s) is less than twice maxMemory (%s; spec.redis.memory in v1beta1, spec.eviction in v1alpha1): "+
					"Redis writes a second copy of its dataset while it rewrites the snapshot (or append-only file) and would fill the volume; "+
					"lower maxMemory to at most half the size, or move to a new RedisCache with a larger persistence.size (fixed at creation)",
					p.Size.String(), m.MaxMemory.String())
			}
		}
	}
	if b := spec.Backup; b != nil {
		if err := schedule.Validate(b.Schedule, ""); err != nil {
			return fmt.Errorf("spec.backup.schedule: %w", err)
		}
	}
	return nil
}
