package cache

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/flowcontrol"
)

// Options tune the RedisCache controller.
type Options struct {
	// MaxConcurrentReconciles is how many RedisCaches are reconciled at once.
	MaxConcurrentReconciles int
	// Wrap, when set, wraps the reconciler (instrumentation, e.g. counting reconciles in tests).
	Wrap func(reconcile.Reconciler) reconcile.Reconciler
}

// SetupWithManager registers the controller. RedisCache events pass only on a spec change
// (generation); owned objects pass on what can make them drift from the desired state, plus the
// Deployment status fields readiness is computed from.
func (r *RedisCacheReconciler) SetupWithManager(mgr ctrl.Manager, opts Options) error {
	drift := predicate.Or[client.Object](
		predicate.GenerationChangedPredicate{},
		predicate.LabelChangedPredicate{},
		predicate.AnnotationChangedPredicate{},
	)
	addr := r.PodAddress
	if addr == nil {
		addr = podIPAddress
	}
	r.probe = newPrimaryProbe(mgr.GetClient(), addr, r.now)
	if err := mgr.Add(r.probe); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&cachev1beta1.RedisCache{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&appsv1.Deployment{}, builder.WithPredicates(predicate.Or(drift, deploymentReadinessChanged()))).
		Owns(&appsv1.StatefulSet{}, builder.WithPredicates(predicate.Or(drift, statefulSetReadinessChanged()))).
		// The pods of a cache in Replication mode: a deleted, restarted or unready pod may need a
		// failover now, not at the next resync.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(replicationPodToCache)).
		// A primary that stops (or starts again) answering the operator's PING (see primaryProbe).
		WatchesRawSource(source.Channel(r.probe.events, handler.EnqueueRequestsFromMapFunc(replicationPodToCache))).
		Owns(&policyv1.PodDisruptionBudget{}, builder.WithPredicates(drift)).
		// spec.backup and spec.restoreFrom: the runs of the PVCBackup and the PVCRestore show in
		// their status.
		Owns(&storagev1.PVCBackup{}).
		Owns(&storagev1.PVCRestore{}).
		// ConfigMaps and Services have no metadata.generation: compare their content instead.
		Owns(&corev1.ConfigMap{}, builder.WithPredicates(predicate.Or(drift, contentChanged(func(cm *corev1.ConfigMap) any {
			return []any{cm.Data, cm.BinaryData}
		})))).
		Owns(&corev1.Service{}, builder.WithPredicates(predicate.Or(drift, contentChanged(func(s *corev1.Service) any {
			return s.Spec
		})))).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
			RateLimiter:             flowcontrol.RateLimiter(),
		}).
		Named("rediscache").
		Complete(wrap(r, opts.Wrap))
}

// deploymentReadinessChanged passes Deployment updates that change what computeStatus reads.
func deploymentReadinessChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*appsv1.Deployment)
		n, ok2 := e.ObjectNew.(*appsv1.Deployment)
		if !ok1 || !ok2 {
			return false
		}
		return !equality.Semantic.DeepEqual(readinessOf(o), readinessOf(n))
	}}
}

// statefulSetReadinessChanged passes StatefulSet updates that change what computeStatus reads.
func statefulSetReadinessChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*appsv1.StatefulSet)
		n, ok2 := e.ObjectNew.(*appsv1.StatefulSet)
		return ok1 && ok2 && !equality.Semantic.DeepEqual(o.Status, n.Status)
	}}
}

// replicationPodToCache maps a pod of a RedisCache's StatefulSet (Replication mode) to the
// RedisCache; other pods, those of Standalone Deployments included, map to nothing.
func replicationPodToCache(_ context.Context, obj client.Object) []reconcile.Request {
	ref := metav1.GetControllerOf(obj)
	l := obj.GetLabels()
	if ref == nil || ref.Kind != "StatefulSet" || l["app.kubernetes.io/name"] != "rediscache" || l["app.kubernetes.io/instance"] != ref.Name {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}}}
}

// CachedObjects restricts the manager's informers for the kinds a RedisCache owns to the
// operator's own objects (and pods to Redis pods): without it the cache holds every ConfigMap,
// Service, Deployment, StatefulSet and PodDisruptionBudget of the cluster. A child whose label
// was removed drops out of the cache; ensure finds it again when its create fails.
func CachedObjects() map[client.Object]cache.ByObject {
	ours := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{"app.kubernetes.io/managed-by": "okgoes-operator"})}
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}:                   {Label: PodCacheSelector()},
		&corev1.ConfigMap{}:             ours,
		&corev1.Service{}:               ours,
		&appsv1.Deployment{}:            ours,
		&appsv1.StatefulSet{}:           ours,
		&policyv1.PodDisruptionBudget{}: ours,
		// Not PVCBackup and PVCRestore: the storage controllers share the informer and need
		// every one of them, not only those a RedisCache owns.
	}
}

// PodCacheSelector restricts the manager's pod informer to Redis pods: the operator needs no
// other pod, and a cluster's pods would fill its memory.
func PodCacheSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{"app.kubernetes.io/name": "rediscache"})
}

func readinessOf(d *appsv1.Deployment) appsv1.DeploymentStatus {
	s := *d.Status.DeepCopy()
	s.CollisionCount = nil
	for i := range s.Conditions { // heartbeat timestamps alone are not a change
		s.Conditions[i].LastUpdateTime = s.Conditions[i].LastTransitionTime
	}
	return s
}

// contentChanged passes updates where the part of the object returned by content changed.
func contentChanged[T client.Object](content func(T) any) predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(T)
		n, ok2 := e.ObjectNew.(T)
		return ok1 && ok2 && !equality.Semantic.DeepEqual(content(o), content(n))
	}}
}

func wrap(r reconcile.Reconciler, w func(reconcile.Reconciler) reconcile.Reconciler) reconcile.Reconciler {
	if w == nil {
		return r
	}
	return w(r)
}

// SetupConversionWebhook serves /convert for cache.okgoes.com: the API server calls it whenever
// a RedisCache is read or written at a version other than the one it is stored at. The scheme
// must hold every served version (v1beta1 is the hub; v1alpha1 converts through it).
func SetupConversionWebhook(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &cachev1beta1.RedisCache{}).Complete()
}
