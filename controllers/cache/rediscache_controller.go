// Package cache holds the RedisCache reconciler: it keeps a ConfigMap, a Deployment, a Service
// and (with more than one replica) a PodDisruptionBudget converged with each RedisCache.
package cache

import (
	"context"
	"fmt"
	"reflect"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/phase"
	"github.com/okgoes/okgoes-operator/internal/statuspatch"
)

const (
	// waitForReplicas is the requeue while the pods of a cache in Replication mode are not all
	// ready or in sync: the StatefulSet's status is watched, Redis's replication state is not.
	waitForReplicas = 10 * time.Second
	// readinessSafetyNet is the requeue of a Standalone cache that is not Ready: every change of
	// readiness shows in its Deployment's status, which is watched, so this is only a safety net,
	// long enough that 1,000 caches waiting for pods cost under one reconcile per second.
	readinessSafetyNet = 30 * time.Minute
	// defaultSecretPollInterval is how often a missing auth Secret is looked for again.
	defaultSecretPollInterval = 30 * time.Second
)

// RedisCacheReconciler reconciles RedisCache objects.
type RedisCacheReconciler struct {
	client.Client
	// APIReader reads objects the manager does not cache (the auth Secret: the operator only
	// checks that it exists, and needs no list/watch on Secrets for that).
	APIReader client.Reader
	Recorder  record.EventRecorder
	// SecretPollInterval is how often a missing auth Secret is looked for again (default 30s).
	SecretPollInterval time.Duration
	// Redis talks to the Redis servers of caches in Replication mode (default redisadmin.Client).
	Redis RedisAdmin
	// PodAddress is where a Redis pod is reached (default: its pod IP and the cache's port).
	PodAddress PodAddress
	// Now is the clock of the failover timeout (default time.Now).
	Now func() time.Time

	// probe pings the primaries (set up by SetupWithManager; nil for a reconciler used alone).
	probe *primaryProbe
}

func (r *RedisCacheReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// scope is what the phases of one reconcile share.
type scope struct {
	cache *cachev1beta1.RedisCache
	obs   observation
	// password of the cache's Redis servers, read in Replication mode only (the operator must
	// authenticate to them); kept in memory for this reconcile, never written anywhere.
	password string
	// previousPassword is the Secret's "<key>.previous", present while a rotation is in progress.
	previousPassword string
}

// +kubebuilder:rbac:groups=cache.okgoes.com,resources=rediscaches,verbs=get;list;watch
// +kubebuilder:rbac:groups=cache.okgoes.com,resources=rediscaches/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cache.okgoes.com,resources=rediscaches/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=configmaps;services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=storage.okgoes.com,resources=pvcbackups;pvcrestores,verbs=get;list;watch;create;update;patch;delete

// Reconcile drives the children of one RedisCache to their desired state and records what it
// observed in the status, written once at the end.
func (r *RedisCacheReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	rc := &cachev1beta1.RedisCache{}
	if err := r.Get(ctx, req.NamespacedName, rc); err != nil {
		if apierrors.IsNotFound(err) {
			forgetMetrics(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !rc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // children go with it through their owner references
	}
	base := rc.DeepCopy()
	s := &scope{cache: rc, obs: observation{now: r.now()}}
	s.obs.err = phase.Run(ctx, s,
		r.reconcileSpec,
		r.reconcileAdmission,
		r.reconcileAuth,
		r.reconcileConfigMap,
		r.reconcileDeployment,
		r.reconcileRestore,
		r.reconcileStatefulSet,
		r.reconcileService,
		r.reconcileReplicasService,
		r.reconcilePDB,
		r.reconcileReplication,
		r.reconcileBackup,
	)
	rc.Status = computeStatus(rc, s.obs)

	res, err := errclass.Result(s.obs.err, requeueAfter(rc.Status, s.obs))
	// The gauges move before the status is written, so whoever sees the new status (a user, a
	// test) also sees the metrics that go with it.
	observeMetrics(rc)
	if s.obs.err == nil {
		observeReplicationMetrics(rc, s.obs.replication)
	}
	switch perr := r.patchStatus(ctx, base, rc); {
	case apierrors.IsConflict(perr):
		// The cache handed us an older RedisCache than the stored one; a patch computed from it
		// was refused (see patchStatus). The watch event of the newer one is on its way.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	case perr != nil && err == nil:
		err = perr
	}
	r.recordTransition(base, rc)
	return res, err
}

// reconcileSpec checks what admission could not (see validateSpec).
func (r *RedisCacheReconciler) reconcileSpec(_ context.Context, s *scope) error {
	if err := validateSpec(s.cache.Spec); err != nil {
		return errclass.Stalled(ReasonInvalidSpec, err.Error())
	}
	return nil
}

// reconcileAdmission asks the API server, with a server-side dry run, whether it accepts the
// Deployment built from the spec, before any child is written. The Deployment is the one child
// built from free-form user input (resources, tolerations, affinity, node selector) that only the
// API server can judge in full; learning of a rejection while writing it would leave the
// ConfigMap already created or rewritten for a spec that never runs. Nothing is sent when the
// Deployment already matches the spec, so a converged cache still makes no request.
func (r *RedisCacheReconciler) reconcileAdmission(ctx context.Context, s *scope) error {
	hash := configHash(renderRedisConf(s.cache.Spec))
	if isReplication(s.cache.Spec) {
		return dryRunWorkload(ctx, r, s.cache, "StatefulSet", &appsv1.StatefulSet{}, func(sts *appsv1.StatefulSet) {
			mutateStatefulSet(sts, s.cache, hash, desiredReplicas(s.cache))
		})
	}
	return dryRunWorkload(ctx, r, s.cache, "Deployment", &appsv1.Deployment{}, func(dep *appsv1.Deployment) {
		mutateDeployment(dep, s.cache, hash)
	})
}

// dryRunWorkload is reconcileAdmission for the workload kind of the cache's mode.
func dryRunWorkload[T client.Object](ctx context.Context, r *RedisCacheReconciler, rc *cachev1beta1.RedisCache, kind string, current T, mutate func(T)) error {
	err := r.Get(ctx, types.NamespacedName{Namespace: rc.Namespace, Name: rc.Name}, current)
	switch {
	case apierrors.IsNotFound(err):
		obj := current.DeepCopyObject().(T)
		obj.SetNamespace(rc.Namespace)
		obj.SetName(rc.Name)
		mutate(obj)
		if err := controllerutil.SetControllerReference(rc, obj, r.Scheme()); err != nil {
			return err
		}
		err := r.Create(ctx, obj, client.DryRunAll)
		if apierrors.IsAlreadyExists(err) {
			return nil // exists without our labels, outside the cache: ensure adopts it back or reports the conflict
		}
		return classifyChildError(kind, err)
	case err != nil:
		return fmt.Errorf("get %s: %w", kind, err)
	case !metav1.IsControlledBy(current, rc):
		return errConflict(kind, current.GetName())
	}
	obj := current.DeepCopyObject().(T)
	mutate(obj)
	patch := client.MergeFrom(current)
	if data, err := patch.Data(obj); err != nil {
		return fmt.Errorf("diff %s: %w", kind, err)
	} else if string(data) == "{}" {
		return nil
	}
	return classifyChildError(kind, r.Patch(ctx, obj, patch, client.DryRunAll))
}

// reconcileAuth checks that the password Secret exists. The operator never reads the password
// out of it: the pods get it through a secretKeyRef.
func (r *RedisCacheReconciler) reconcileAuth(ctx context.Context, s *scope) error {
	a := s.cache.Spec.Redis.Auth
	if a == nil {
		return nil
	}
	poll := r.SecretPollInterval
	if poll == 0 {
		poll = defaultSecretPollInterval
	}
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: s.cache.Namespace, Name: a.SecretRef.Name}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return errclass.Waiting(ReasonAuthSecretNotFound,
			fmt.Sprintf("Secret %q named by spec.auth.secretRef does not exist", a.SecretRef.Name), poll)
	case err != nil:
		return fmt.Errorf("get auth secret: %w", err)
	}
	switch v, ok := secret.Data[secretKey(a)]; {
	case !ok:
		return errclass.Waiting(ReasonAuthSecretNotFound,
			fmt.Sprintf("Secret %q has no key %q", a.SecretRef.Name, secretKey(a)), poll)
	case len(v) == 0:
		// An empty requirepass would leave Redis without a password: never start it like that.
		return errclass.Waiting(ReasonAuthSecretNotFound,
			fmt.Sprintf("Secret %q has an empty key %q: set the password", a.SecretRef.Name, secretKey(a)), poll)
	}
	if isReplication(s.cache.Spec) {
		s.password = string(secret.Data[secretKey(a)])
		s.previousPassword = string(secret.Data[secretKey(a)+previousKeySuffix])
	}
	return nil
}

func (r *RedisCacheReconciler) reconcileConfigMap(ctx context.Context, s *scope) error {
	conf := renderRedisConf(s.cache.Spec)
	s.obs.configHash = configHash(conf)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.cache.Namespace, Name: configMapName(s.cache)}}
	return r.ensure(ctx, s.cache, "ConfigMap", cm, func() { mutateConfigMap(cm, s.cache, conf) })
}

func (r *RedisCacheReconciler) reconcileDeployment(ctx context.Context, s *scope) error {
	if isReplication(s.cache.Spec) {
		return nil
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: s.cache.Namespace, Name: s.cache.Name}}
	if err := r.ensure(ctx, s.cache, "Deployment", dep, func() { mutateDeployment(dep, s.cache, s.obs.configHash) }); err != nil {
		return err
	}
	s.obs.deployment = dep
	return nil
}

func (r *RedisCacheReconciler) reconcileStatefulSet(ctx context.Context, s *scope) error {
	if !isReplication(s.cache.Spec) {
		return nil
	}
	p, err := r.primaryOrdinal(ctx, s.cache)
	if err != nil {
		return err
	}
	replicas := statefulSetReplicas(s.cache, p)
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: s.cache.Namespace, Name: s.cache.Name}}
	if err := r.ensure(ctx, s.cache, "StatefulSet", sts, func() { mutateStatefulSet(sts, s.cache, s.obs.configHash, replicas) }); err != nil {
		return err
	}
	s.obs.statefulSet = sts
	return nil
}

func (r *RedisCacheReconciler) reconcileService(ctx context.Context, s *scope) error {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: s.cache.Namespace, Name: s.cache.Name}}
	return r.ensure(ctx, s.cache, "Service", svc, func() { mutateService(svc, s.cache) })
}

// reconcileReplicasService keeps the read Service of a cache in Replication mode.
func (r *RedisCacheReconciler) reconcileReplicasService(ctx context.Context, s *scope) error {
	if !isReplication(s.cache.Spec) {
		return nil
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: s.cache.Namespace, Name: replicasServiceName(s.cache)}}
	return r.ensure(ctx, s.cache, "Service", svc, func() { mutateReplicasService(svc, s.cache) })
}

// reconcilePDB keeps a PodDisruptionBudget while there is more than one replica and removes ours
// otherwise.
func (r *RedisCacheReconciler) reconcilePDB(ctx context.Context, s *scope) error {
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: s.cache.Namespace, Name: s.cache.Name}}
	if wantsPDB(s.cache) {
		return r.ensure(ctx, s.cache, "PodDisruptionBudget", pdb, func() { mutatePDB(pdb, s.cache) })
	}
	if err := r.Get(ctx, client.ObjectKeyFromObject(pdb), pdb); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(pdb, s.cache) {
		return nil
	}
	return client.IgnoreNotFound(r.Delete(ctx, pdb, client.Preconditions{UID: &pdb.UID}))
}

// ensure creates or patches obj so that mutate's fields hold, with rc as its controller. It
// refuses to adopt an object of the same name that something else created.
func (r *RedisCacheReconciler) ensure(ctx context.Context, rc *cachev1beta1.RedisCache, kind string, obj client.Object, mutate func()) error {
	op, err := controllerutil.CreateOrPatch(ctx, r.Client, obj, func() error {
		if obj.GetUID() != "" && !metav1.IsControlledBy(obj, rc) {
			return errConflict(kind, obj.GetName())
		}
		mutate()
		return controllerutil.SetControllerReference(rc, obj, r.Scheme())
	})
	if apierrors.IsAlreadyExists(err) {
		err = r.ensureOutsideCache(ctx, rc, kind, obj, mutate)
		op = "patched outside the cache"
	}
	if op != controllerutil.OperationResultNone {
		log.FromContext(ctx).V(1).Info("wrote child", "kind", kind, "name", obj.GetName(), "operation", op)
	}
	return classifyChildError(kind, err)
}

// ensureOutsideCache is ensure for a child the cache does not hold although it exists: the
// manager caches only objects labelled as its own (CachedObjects), so this is one whose labels
// someone removed (patched back here, with the rest of mutate's fields) or an object of the same
// name that something else created (a conflict, as in ensure). Read uncached, once.
func (r *RedisCacheReconciler) ensureOutsideCache(ctx context.Context, rc *cachev1beta1.RedisCache, kind string, obj client.Object, mutate func()) error {
	key := client.ObjectKeyFromObject(obj)
	v := reflect.ValueOf(obj).Elem()
	v.Set(reflect.Zero(v.Type())) // drop what the failed create filled in; Get may keep unset fields
	if err := r.APIReader.Get(ctx, key, obj); err != nil {
		return fmt.Errorf("get %s %s outside the cache: %w", kind, key.Name, err)
	}
	if !metav1.IsControlledBy(obj, rc) {
		return errConflict(kind, key.Name)
	}
	base := obj.DeepCopyObject().(client.Object)
	mutate()
	if err := controllerutil.SetControllerReference(rc, obj, r.Scheme()); err != nil {
		return err
	}
	return r.Patch(ctx, obj, client.MergeFrom(base))
}

// patchStatus is the reconcile's one status write (statuspatch.Patch: once, only when the status
// changed, refused with a Conflict when computed from a stale copy).
func (r *RedisCacheReconciler) patchStatus(ctx context.Context, base, rc *cachev1beta1.RedisCache) error {
	_, err := statuspatch.Patch(ctx, r.Client, base, rc, func(rc *cachev1beta1.RedisCache) any { return rc.Status })
	return err
}

// recordTransition emits an event when the Ready condition changes status or reason, never on
// every reconcile.
func (r *RedisCacheReconciler) recordTransition(base, rc *cachev1beta1.RedisCache) {
	before := meta.FindStatusCondition(base.Status.Conditions, cachev1beta1.ConditionReady)
	after := meta.FindStatusCondition(rc.Status.Conditions, cachev1beta1.ConditionReady)
	if after == nil || r.Recorder == nil {
		return
	}
	if before != nil && before.Status == after.Status && before.Reason == after.Reason {
		return
	}
	eventType := corev1.EventTypeNormal
	if after.Status != metav1.ConditionTrue && rc.Status.Phase == cachev1beta1.PhaseDegraded {
		eventType = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(rc, eventType, after.Reason, "%s", after.Message)
}
