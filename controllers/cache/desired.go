package cache

import (
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
)

// The mutate functions below set only the fields the operator owns, on whatever the API server
// returned. Fields defaulted by the server or set by other writers (a `kubectl rollout restart`
// annotation, an added label) are left alone, so a converged cache produces no writes at all.

const (
	// configHashAnnotation on the pod template carries configHash of the mounted redis.conf.
	configHashAnnotation = "cache.okgoes.com/config-hash"
	redisContainer       = "redis"
	redisPortName        = "redis"
	configVolume         = "config"
	dataVolume           = "data"
	configMountPath      = "/etc/redis"
	// redisUID is the uid of the redis user in the official Redis images.
	redisUID = 999
	// passwordEnv is read by redis-server (through the args) and redis-cli (REDISCLI_AUTH).
	passwordEnv = "REDIS_PASSWORD"
	// authVolume holds the password as a file in Replication mode: the kubelet updates it when the
	// Secret changes, so the readiness probe follows a rotation that restarts no pod.
	authVolume    = "auth"
	authMountPath = "/etc/redis-auth"
	// previousKeySuffix: "<key>.previous" in the Secret is the password being rotated away from.
	previousKeySuffix = ".previous"
)

// selectorLabels select the pods of one RedisCache. They are immutable once the Deployment exists.
func selectorLabels(rc *cachev1beta1.RedisCache) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":     "rediscache",
		"app.kubernetes.io/instance": rc.Name,
	}
}

// childLabels are put on every child object and pod.
func childLabels(rc *cachev1beta1.RedisCache) map[string]string {
	l := selectorLabels(rc)
	l["app.kubernetes.io/component"] = "cache"
	l["app.kubernetes.io/managed-by"] = "okgoes-operator"
	return l
}

func configMapName(rc *cachev1beta1.RedisCache) string { return rc.Name + "-config" }

// mergeInto sets the given keys in m (allocating it if needed) and keeps every other key.
func mergeInto(m map[string]string, kv map[string]string) map[string]string {
	if m == nil {
		m = make(map[string]string, len(kv))
	}
	for k, v := range kv {
		m[k] = v
	}
	return m
}

func desiredReplicas(rc *cachev1beta1.RedisCache) int32 {
	return ptr.Deref(rc.Spec.Replicas, 1)
}

// mutateConfigMap makes cm carry the rendered configuration.
func mutateConfigMap(cm *corev1.ConfigMap, rc *cachev1beta1.RedisCache, conf string) {
	cm.Labels = mergeInto(cm.Labels, childLabels(rc))
	cm.Data = map[string]string{redisConfKey: conf}
	cm.BinaryData = nil
}

// mutateService makes svc a ClusterIP Service in front of the Redis pods.
func mutateService(svc *corev1.Service, rc *cachev1beta1.RedisCache) {
	svc.Labels = mergeInto(svc.Labels, childLabels(rc))
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	svc.Spec.Selector = selectorLabels(rc)
	port := corev1.ServicePort{}
	for _, p := range svc.Spec.Ports {
		if p.Name == redisPortName {
			port = p
		}
	}
	port.Name = redisPortName
	port.Protocol = corev1.ProtocolTCP
	port.Port = rc.Spec.Redis.Port
	port.TargetPort = intstr.FromString(redisPortName)
	svc.Spec.Ports = []corev1.ServicePort{port}
	if isReplication(rc.Spec) {
		// Only the pod the operator labelled primary: writes never reach a replica.
		svc.Spec.Selector = mergeInto(selectorLabels(rc), map[string]string{roleLabel: rolePrimary})
	}
}

func replicasServiceName(rc *cachev1beta1.RedisCache) string { return rc.Name + "-replicas" }

// mutateReplicasService makes svc the read Service of a cache in Replication mode: the replicas
// the operator labelled in sync with the primary.
func mutateReplicasService(svc *corev1.Service, rc *cachev1beta1.RedisCache) {
	mutateService(svc, rc)
	svc.Spec.Selector = mergeInto(selectorLabels(rc), map[string]string{roleLabel: roleReplica})
}

// mutatePDB makes pdb limit voluntary disruptions of the Redis pods.
func mutatePDB(pdb *policyv1.PodDisruptionBudget, rc *cachev1beta1.RedisCache) {
	pdb.Labels = mergeInto(pdb.Labels, childLabels(rc))
	maxUnavailable := intstr.FromInt32(1)
	if p := rc.Spec.PodDisruptionBudget; p != nil && p.MaxUnavailable != nil {
		maxUnavailable = intstr.FromInt32(*p.MaxUnavailable)
	}
	pdb.Spec.MaxUnavailable = &maxUnavailable
	pdb.Spec.MinAvailable = nil
	pdb.Spec.Selector = &metav1.LabelSelector{MatchLabels: selectorLabels(rc)}
}

// wantsPDB tells whether rc should have a PodDisruptionBudget: only with more than one replica,
// since a PDB over a single pod would block every node drain.
func wantsPDB(rc *cachev1beta1.RedisCache) bool {
	if p := rc.Spec.PodDisruptionBudget; p != nil && p.Enabled != nil && !*p.Enabled {
		return false
	}
	return desiredReplicas(rc) > 1
}

// mutateDeployment makes dep run the Redis pods of rc with the configuration identified by hash.
func mutateDeployment(dep *appsv1.Deployment, rc *cachev1beta1.RedisCache, hash string) {
	dep.Labels = mergeInto(dep.Labels, childLabels(rc))
	dep.Spec.Replicas = ptr.To(desiredReplicas(rc))
	if dep.Spec.Selector == nil { // immutable after creation
		dep.Spec.Selector = &metav1.LabelSelector{MatchLabels: selectorLabels(rc)}
	}
	mutatePodTemplate(&dep.Spec.Template, rc, hash)
}

// mutateStatefulSet makes sts run the Redis pods of rc in Replication mode: stable names
// (<name>-0, <name>-1, ...) the status and the role labels refer to. Pods start and stop in
// parallel: no pod waits for another, the operator elects the primary among those that answer.
// replicas is statefulSetReplicas: spec.replicas, or more while the primary waits to hand over.
func mutateStatefulSet(sts *appsv1.StatefulSet, rc *cachev1beta1.RedisCache, hash string, replicas int32) {
	sts.Labels = mergeInto(sts.Labels, childLabels(rc))
	sts.Spec.Replicas = ptr.To(replicas)
	if sts.Spec.Selector == nil { // immutable after creation, like the two fields below
		sts.Spec.Selector = &metav1.LabelSelector{MatchLabels: selectorLabels(rc)}
	}
	if sts.Spec.PodManagementPolicy == "" {
		sts.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	}
	if sts.Spec.ServiceName == "" {
		sts.Spec.ServiceName = replicasServiceName(rc)
	}
	if p := rc.Spec.Persistence; p != nil {
		if sts.UID == "" { // volume claim templates are immutable: set once, when the StatefulSet is made
			sts.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{dataClaimTemplate(rc, p)}
		}
		// Claims of pods a scale-down removes are kept: a later scale-up reuses them (the pod
		// then resyncs from the primary). Deleting them could lose the only copy of writes a
		// primary-to-be had not yet passed on.
		whenDeleted := appsv1.RetainPersistentVolumeClaimRetentionPolicyType
		if p.ReclaimPolicy == cachev1beta1.ReclaimDelete {
			whenDeleted = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
		}
		sts.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenDeleted: whenDeleted,
			WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
		}
	}
	mutatePodTemplate(&sts.Spec.Template, rc, hash)
}

// dataClaimTemplate is the claim each pod of a persistent cache keeps its data on: data-<name>-<ordinal>.
func dataClaimTemplate(rc *cachev1beta1.RedisCache, p *cachev1beta1.Persistence) corev1.PersistentVolumeClaim {
	return corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: dataVolume, Labels: selectorLabels(rc)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: p.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: p.Size}},
		},
	}
}

// mutatePodTemplate makes tpl the Redis pod of rc with the configuration identified by hash.
func mutatePodTemplate(tpl *corev1.PodTemplateSpec, rc *cachev1beta1.RedisCache, hash string) {
	tpl.Labels = mergeInto(tpl.Labels, childLabels(rc))
	tpl.Annotations = mergeInto(tpl.Annotations, map[string]string{configHashAnnotation: hash})

	pod := &tpl.Spec
	pod.AutomountServiceAccountToken = ptr.To(false)
	pod.EnableServiceLinks = ptr.To(false)
	pod.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](redisUID),
		RunAsGroup:     ptr.To[int64](redisUID),
		FSGroup:        ptr.To[int64](redisUID),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	pod.NodeSelector = nil
	if len(rc.Spec.NodeSelector) > 0 {
		pod.NodeSelector = rc.Spec.NodeSelector
	}
	pod.Tolerations = rc.Spec.Tolerations
	pod.Affinity = rc.Spec.Affinity
	pod.Volumes = upsertVolume(pod.Volumes, corev1.Volume{Name: configVolume, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: configMapName(rc)},
			DefaultMode:          ptr.To[int32](corev1.ConfigMapVolumeSourceDefaultMode),
		},
	}})
	if rc.Spec.Persistence == nil { // else the StatefulSet's claim template "data" provides it
		pod.Volumes = upsertVolume(pod.Volumes, corev1.Volume{Name: dataVolume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{},
		}})
	}
	if a := rc.Spec.Redis.Auth; a != nil && isReplication(rc.Spec) {
		pod.Volumes = upsertVolume(pod.Volumes, corev1.Volume{Name: authVolume, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{
				SecretName:  a.SecretRef.Name,
				Items:       []corev1.KeyToPath{{Key: secretKey(a), Path: "password"}},
				DefaultMode: ptr.To[int32](0o440),
			},
		}})
	}

	i := containerIndex(pod.Containers, redisContainer)
	if i < 0 {
		pod.Containers = append(pod.Containers, corev1.Container{Name: redisContainer})
		i = len(pod.Containers) - 1
	}
	mutateRedisContainer(&pod.Containers[i], rc)
	if p := rc.Spec.Persistence; p != nil && p.AppendOnly && rc.Spec.RestoreFrom != nil {
		pod.InitContainers = []corev1.Container{restoreAOFInitContainer(&pod.Containers[i])}
	}
}

func mutateRedisContainer(c *corev1.Container, rc *cachev1beta1.RedisCache) {
	c.Image = rc.Spec.Redis.Image
	c.ImagePullPolicy = pullPolicy(rc.Spec.Redis.Image, rc.Spec.Redis.ImagePullPolicy)
	c.Command = []string{"redis-server"}
	c.Args = []string{configMountPath + "/" + redisConfKey}
	c.Env = nil
	if a := rc.Spec.Redis.Auth; a != nil {
		// $(VAR) is expanded by the kubelet, so the password never appears in any object.
		c.Args = append(c.Args, "--requirepass", "$("+passwordEnv+")")
		if isReplication(rc.Spec) {
			c.Args = append(c.Args, "--masterauth", "$("+passwordEnv+")")
		}
		ref := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: a.SecretRef.Name},
			Key:                  secretKey(a),
		}}
		c.Env = []corev1.EnvVar{{Name: passwordEnv, ValueFrom: ref}, {Name: "REDISCLI_AUTH", ValueFrom: ref}}
	}
	c.Ports = []corev1.ContainerPort{{Name: redisPortName, ContainerPort: rc.Spec.Redis.Port, Protocol: corev1.ProtocolTCP}}
	c.Resources = rc.Spec.Resources
	ping := "redis-cli -p " + itoa(rc.Spec.Redis.Port) + " ping | grep -q PONG"
	if rc.Spec.Redis.Auth != nil && isReplication(rc.Spec) {
		// The password file follows the Secret; the environment is fixed at container start.
		ping = `REDISCLI_AUTH="$(cat ` + authMountPath + `/password)" ` + ping
	}
	c.ReadinessProbe = probe(corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", ping}}}, 5)
	if isReplication(rc.Spec) {
		c.ReadinessProbe = replicationReadinessProbe(rc)
	}
	c.LivenessProbe = probe(corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{
		Port: intstr.FromString(redisPortName),
	}}, 15)
	c.SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	c.VolumeMounts = []corev1.VolumeMount{
		{Name: configVolume, MountPath: configMountPath, ReadOnly: true},
		{Name: dataVolume, MountPath: "/data"},
	}
	if rc.Spec.Redis.Auth != nil && isReplication(rc.Spec) {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: authVolume, MountPath: authMountPath, ReadOnly: true})
	}
}

// replicationReadinessProbe fails within seconds when Redis does not answer: a primary or replica
// that hangs leaves the Services' endpoints (and the primary counts as unavailable, see
// decidePrimary). The Standalone probe (redis-cli piped into grep) never does: when the exec times
// out the container runtime kills sh, but grep, waiting for redis-cli, which waits for the hung
// server, keeps the exec's output open, and the runtime waits for it; the kubelet gets no result
// at all and the pod stays Ready (measured: 60 s of SIGSTOP, issue 36). Here redis-cli writes into
// a command substitution, so only sh holds the exec's output and the timeout ends the probe; a
// redis-cli left waiting for a hung server exits when it answers again. Standalone pods keep
// their probe: changing it would roll every Standalone cache on upgrade.
func replicationReadinessProbe(rc *cachev1beta1.RedisCache) *corev1.Probe {
	cli := "redis-cli -p " + itoa(rc.Spec.Redis.Port) + " ping"
	if rc.Spec.Redis.Auth != nil {
		// The password file follows the Secret; the environment is fixed at container start.
		cli = `REDISCLI_AUTH="$(cat ` + authMountPath + `/password)" ` + cli
	}
	script := `r=$(` + cli + ` </dev/null 2>&1); [ "$r" = PONG ]`
	p := probe(corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", script}}}, 5)
	p.PeriodSeconds, p.FailureThreshold = 3, 2 // unready 3-8 s into a hang
	return p
}

func secretKey(a *cachev1beta1.Auth) string {
	if a.SecretRef.Key == "" {
		return "password"
	}
	return a.SecretRef.Key
}

// probe fills every field the API server would otherwise default, so the stored object equals
// what we build and no write is ever needed to "fix" a default.
func probe(h corev1.ProbeHandler, initialDelay int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:        h,
		InitialDelaySeconds: initialDelay,
		TimeoutSeconds:      2,
		PeriodSeconds:       10,
		SuccessThreshold:    1,
		FailureThreshold:    3,
	}
}

// pullPolicy is the policy asked for, or the one the API server would default for image.
func pullPolicy(image string, asked corev1.PullPolicy) corev1.PullPolicy {
	if asked != "" {
		return asked
	}
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	name := image[strings.LastIndex(image, "/")+1:]
	if !strings.Contains(name, ":") || strings.HasSuffix(name, ":latest") {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

func containerIndex(cs []corev1.Container, name string) int {
	for i := range cs {
		if cs[i].Name == name {
			return i
		}
	}
	return -1
}

// upsertVolume replaces the volume of the same name, or appends it, keeping other volumes.
func upsertVolume(vs []corev1.Volume, v corev1.Volume) []corev1.Volume {
	for i := range vs {
		if vs[i].Name == v.Name {
			vs[i] = v
			return vs
		}
	}
	return append(vs, v)
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }
