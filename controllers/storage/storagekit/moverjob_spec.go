package storagekit

import (
	"fmt"
	"path"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

const (
	MoverContainer = "mover"
	VolumeMount    = "/data"
	caMount        = "/etc/okgoes/s3-ca"
	// moverUID is the distroless "nonroot" user the operator image runs as.
	moverUID = 65532
)

func credentialKeys(loc storagev1.S3Location) (accessKey, secretKey string) {
	ref := loc.CredentialsSecretRef
	accessKey, secretKey = ref.AccessKeyIDKey, ref.SecretAccessKeyKey
	if accessKey == "" {
		accessKey = "AWS_ACCESS_KEY_ID"
	}
	if secretKey == "" {
		secretKey = "AWS_SECRET_ACCESS_KEY"
	}
	return accessKey, secretKey
}

func caKey(ref *storagev1.SecretKeySelector) string {
	if ref.Key == "" {
		return "ca.crt"
	}
	return ref.Key
}

// MoverJob describes one mover Job; DesiredMoverJob turns it into the Job object.
type MoverJob struct {
	Name    string
	Labels  map[string]string
	Command string // backup or restore
	Claim   string
	// Members are the claims of a group (a group backup or restore), each mounted at
	// VolumeMount/<Dir>, instead of Claim at VolumeMount.
	Members  []MemberClaim
	ReadOnly bool
	Env      []corev1.EnvVar
	Options  *storagev1.MoverOptions
	// fsGroup makes a fresh volume writable by the non-root mover (restore).
	FSGroup bool
	// KopiaCacheDir mounts kopia's cache directory (a size-limited emptyDir).
	KopiaCache bool
	// deadline is the Job's activeDeadlineSeconds: what is left of the run's deadline (required:
	// a Job with 0 fails at once with DeadlineExceeded).
	Deadline int64
}

// MemberClaim is one claim of a group mover Job: the PVC mounted at VolumeMount/<Dir>.
type MemberClaim struct {
	Dir   string // the member's directory in the backup: its source PVC's name
	Claim string // the PVC mounted there (the member itself, its snapshot's PVC, or a restore target)
}

// DesiredMoverJob is a Job running the operator's own image as the mover, with the S3 location
// and credentials of src (credentials by secretKeyRef only). It is created once, never updated.
func DesiredMoverJob(src S3Source, image string, j MoverJob) *batchv1.Job {
	loc := src.Location
	if j.Deadline <= 0 { // never 0: the Job would fail at once
		j.Deadline = j.Options.Deadline()
	}
	accessKey, secretKey := credentialKeys(loc)
	secretEnv := func(env, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: loc.CredentialsSecretRef.Name}, Key: key}}}
	}
	env := append([]corev1.EnvVar{
		{Name: mover.EnvEndpoint, Value: loc.Endpoint},
		{Name: mover.EnvRegion, Value: loc.Region},
		{Name: mover.EnvBucket, Value: src.Bucket},
		{Name: mover.EnvInsecure, Value: boolString(loc.Insecure)},
		secretEnv(mover.EnvAccessKey, accessKey),
		secretEnv(mover.EnvSecretKey, secretKey),
		{Name: mover.EnvMemoryLimit, ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
			ContainerName: MoverContainer, Resource: "limits.memory"}}},
	}, j.Env...)
	if m := j.Options; m != nil && m.StorageIdleTimeout != nil {
		env = append(env, corev1.EnvVar{Name: mover.EnvIdleTimeout, Value: m.StorageIdle().String()})
	}
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	if j.Claim != "" { // verify reads from S3 only and mounts no volume
		volumes = []corev1.Volume{{Name: "volume", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: j.Claim, ReadOnly: j.ReadOnly}}}}
		mounts = []corev1.VolumeMount{{Name: "volume", MountPath: VolumeMount, ReadOnly: j.ReadOnly}}
	}
	for i, m := range j.Members { // volume names are DNS labels: numbered, not named after the PVCs
		name := fmt.Sprintf("member-%d", i)
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: m.Claim, ReadOnly: j.ReadOnly}}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: path.Join(VolumeMount, m.Dir), ReadOnly: j.ReadOnly})
	}
	if j.KopiaCache {
		volumes = append(volumes, corev1.Volume{Name: "kopia-cache", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &KopiaCacheVolume}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "kopia-cache", MountPath: KopiaCacheDir})
	}
	if ca := loc.CABundleSecretRef; ca != nil {
		volumes = append(volumes, corev1.Volume{Name: "s3-ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: ca.Name, Items: []corev1.KeyToPath{{Key: caKey(ca), Path: "ca.crt"}}}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "s3-ca", MountPath: caMount, ReadOnly: true})
		env = append(env, corev1.EnvVar{Name: mover.EnvCAFile, Value: caMount + "/ca.crt"})
	}

	podSecurity := &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](moverUID),
		RunAsGroup:     ptr.To[int64](moverUID),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if j.FSGroup {
		podSecurity.FSGroup = ptr.To[int64](moverUID)
	}
	var resources corev1.ResourceRequirements
	if m := j.Options; m != nil {
		if m.PodSecurityContext != nil {
			podSecurity = overlayPodSecurity(podSecurity, m.PodSecurityContext)
		}
		resources = m.Resources
	}

	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: src.Namespace, Name: j.Name, Labels: j.Labels},
		Spec: batchv1.JobSpec{
			// One attempt: a failed run is reported, and the next schedule (or a new restore)
			// tries again, rather than re-reading or re-writing a volume several times in a row.
			BackoffLimit: ptr.To[int32](0),
			// The run's deadline: a pod that never starts or a mover that hangs ends the Job
			// (DeadlineExceeded) instead of holding the run forever.
			ActiveDeadlineSeconds: ptr.To(j.Deadline),
			// A safety net only: the controller deletes the Job once it has recorded the result.
			TTLSecondsAfterFinished: ptr.To[int32](24 * 3600),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: j.Labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext:              podSecurity,
					Volumes:                      volumes,
					Containers: []corev1.Container{{
						Name:                     MoverContainer,
						Image:                    image,
						Command:                  []string{"/mover", j.Command},
						Env:                      env,
						VolumeMounts:             mounts,
						Resources:                resources,
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
}

// overlayPodSecurity sets the fields the user gave over the defaults.
func overlayPodSecurity(base, user *corev1.PodSecurityContext) *corev1.PodSecurityContext {
	out := base.DeepCopy()
	if user.RunAsUser != nil {
		out.RunAsUser = user.RunAsUser
	}
	if user.RunAsGroup != nil {
		out.RunAsGroup = user.RunAsGroup
	}
	if user.RunAsNonRoot != nil {
		out.RunAsNonRoot = user.RunAsNonRoot
	}
	if user.FSGroup != nil {
		out.FSGroup = user.FSGroup
	}
	if user.FSGroupChangePolicy != nil {
		out.FSGroupChangePolicy = user.FSGroupChangePolicy
	}
	if len(user.SupplementalGroups) > 0 {
		out.SupplementalGroups = user.SupplementalGroups
	}
	if user.SeccompProfile != nil {
		out.SeccompProfile = user.SeccompProfile
	}
	if user.SELinuxOptions != nil {
		out.SELinuxOptions = user.SELinuxOptions
	}
	return out
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
