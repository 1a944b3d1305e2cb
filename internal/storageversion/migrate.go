// Package storageversion moves stored custom resources to their CRD's storage version and then
// trims status.storedVersions, so that an older version can one day stop being served and be
// removed (the API server refuses to drop a version still listed in storedVersions).
//
// It is the operator's built-in storage version migration: after a release switches the storage
// version of a CRD (0.3.0 switches rediscaches.cache.okgoes.com to v1beta1, docs/upgrades.md), the
// new manager rewrites every object once (an unchanged update re-encodes it at the new storage
// version) and then sets storedVersions to the storage version alone.
package storageversion

import (
	"context"
	"fmt"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Result says what one migration did.
type Result struct {
	StorageVersion string
	Rewritten      int  // objects updated to re-encode them
	Trimmed        bool // storedVersions was changed
}

// Migrate rewrites every object of the CRD named crdName and trims its storedVersions to the
// storage version. It does nothing when storedVersions already holds only the storage version.
// It is safe to run again after a failure or concurrently with other writers: rewriting an object
// twice is harmless, and storedVersions is patched with the CRD's resourceVersion.
func Migrate(ctx context.Context, c client.Client, crdName string) (Result, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, types.NamespacedName{Name: crdName}, crd); err != nil {
		return Result{}, fmt.Errorf("read CRD %s: %w", crdName, err)
	}
	var res Result
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			res.StorageVersion = v.Name
		}
	}
	if res.StorageVersion == "" {
		return res, fmt.Errorf("CRD %s has no storage version", crdName)
	}
	if slices.Equal(crd.Status.StoredVersions, []string{res.StorageVersion}) {
		return res, nil
	}

	gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: res.StorageVersion, Kind: crd.Spec.Names.ListKind}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk)
	for cont := ""; ; {
		if err := c.List(ctx, list, client.Limit(200), client.Continue(cont)); err != nil {
			return res, fmt.Errorf("list %s: %w", crd.Spec.Names.Plural, err)
		}
		for i := range list.Items {
			obj := &list.Items[i]
			// An update that changes nothing still re-encodes the object at the storage version.
			if err := c.Update(ctx, obj); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return res, fmt.Errorf("rewrite %s %s/%s: %w", crd.Spec.Names.Kind, obj.GetNamespace(), obj.GetName(), err)
			}
			// A conflict means someone else just wrote the object: at the storage version too.
			res.Rewritten++
		}
		if cont = list.GetContinue(); cont == "" {
			break
		}
	}

	base := crd.DeepCopy()
	crd.Status.StoredVersions = []string{res.StorageVersion}
	if err := c.Status().Patch(ctx, crd, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return res, fmt.Errorf("trim storedVersions of CRD %s: %w", crdName, err)
	}
	res.Trimmed = true
	return res, nil
}

// Runnable runs Migrate for each CRD once the manager is the leader, retrying with backoff until
// it succeeds (the new objects keep being served meanwhile; nothing waits for it).
type Runnable struct {
	Client client.Client // uncached: RBAC allows reading the named CRDs, not listing all CRDs
	CRDs   []string
}

// NeedLeaderElection is true: one replica migrates.
func (*Runnable) NeedLeaderElection() bool { return true }

// Start migrates, then returns; a failure is retried until ctx ends.
func (r *Runnable) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("storageversion")
	for _, name := range r.CRDs {
		backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 5 * time.Minute}
		_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
			res, err := Migrate(ctx, r.Client, name)
			if err != nil {
				log.Error(err, "storage version migration failed; retrying", "crd", name)
				return false, nil
			}
			if res.Trimmed {
				log.Info("stored objects migrated", "crd", name, "storageVersion", res.StorageVersion, "rewritten", res.Rewritten)
			}
			return true, nil
		})
	}
	return nil
}
