package storage

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// checkDependencies verifies that the PVC and the credentials are there and, with checkBucket,
// that S3 accepts them and has the bucket. Each missing piece is a precise Waiting condition,
// polled, never a retry storm.
func (r *PVCBackupReconciler) checkDependencies(ctx context.Context, s *scope, checkBucket bool) error {
	pb := s.backup
	pvc := claimMetadata()
	err := r.Get(ctx, client.ObjectKey{Namespace: pb.Namespace, Name: pb.Spec.PVCName}, pvc)
	switch {
	case apierrors.IsNotFound(err):
		return errclass.Waiting(ReasonPVCNotFound, fmt.Sprintf("PersistentVolumeClaim %q does not exist", pb.Spec.PVCName), r.poll())
	case err != nil:
		return fmt.Errorf("get PVC: %w", err)
	case !pvc.DeletionTimestamp.IsZero():
		return errclass.Waiting(ReasonPVCNotFound, fmt.Sprintf("PersistentVolumeClaim %q is being deleted", pb.Spec.PVCName), r.poll())
	}
	if pb.Spec.Snapshot != nil && !r.snapshotsServed(ctx) {
		// Found before a run is due, and polled: installing the CRDs heals it (snapshotAPI).
		return errclass.Waiting(ReasonSnapshotsUnsupported, snapshotsUnsupported(r.poll()), r.poll())
	}
	if pb.Spec.Snapshot != nil {
		// The snapshot class depends on the PVC's spec, which the cache does not hold: read it
		// uncached, as the PersistentVolume and classes it leads to are.
		source, err := r.sourceClaim(ctx, pb)
		if err != nil {
			return err
		}
		if s.snapshotClass, err = r.resolveSnapshotClass(ctx, s, source); err != nil {
			return err
		}
	}
	store, err := r.storeFor(ctx, s)
	if err != nil {
		return err
	}
	if !checkBucket {
		if pb.Spec.Engine == storagev1.EngineKopia {
			return s.passwordErr
		}
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, s3Timeout)
	defer cancel()
	exists, err := store.BucketExists(cctx)
	switch {
	case err != nil:
		return classifyS3Error(err, pb.Spec.S3Bucket, r.poll())
	case !exists:
		return errclass.Waiting(ReasonBucketNotFound, fmt.Sprintf("bucket %q does not exist at %s", pb.Spec.S3Bucket, pb.Spec.S3.Endpoint), r.poll())
	}
	if s.engine, err = r.resolveEngine(ctx, s); err != nil {
		return err
	}
	if s.engine == storagev1.EngineKopia {
		return s.passwordErr
	}
	return nil
}

// classifyS3Error turns an S3 error into a condition the user can act on. The messages come from
// the S3 server and minio-go, which never include the secret key.
func classifyS3Error(err error, bucket string, poll time.Duration) error {
	switch {
	case objectstore.IsAccessDenied(err):
		return errclass.Waiting(ReasonCredentialsRejected, fmt.Sprintf("S3 refused the credentials: %v", err), poll)
	case objectstore.IsNoSuchBucket(err):
		return errclass.Waiting(ReasonBucketNotFound, fmt.Sprintf("bucket %q does not exist", bucket), poll)
	default:
		return errclass.Waiting(ReasonEndpointUnreachable, fmt.Sprintf("S3 endpoint unreachable: %v", err), poll)
	}
}

// storeFor opens the ObjectStore of the PVCBackup, once per reconcile.
func (r *PVCBackupReconciler) storeFor(ctx context.Context, s *scope) (ObjectStore, error) {
	if s.store != nil {
		return s.store, nil
	}
	src := backupSource(s.backup)
	store, secret, err := openStore(ctx, r.Deps, src)
	if err == nil {
		s.store = store
		why := "kopia backups (spec.engine Kopia) are"
		if s.backup.Spec.Engine == "" {
			why = "new backups use the kopia engine (spec.engine empty, and the prefix holds no archive backups) and are"
		}
		s.passwordErr = checkPassword(secret, src, why, r.poll())
	}
	return store, err
}

// s3Fields says, in the messages of openStore, where the S3 settings of the object being
// reconciled come from: its own spec.s3 (PVCBackup) or spec.source.s3.location (PVCRestore), or
// the spec.s3 of the PVCBackup a PVCRestore names. A message that names a field the user's object
// does not have sends them looking in the wrong place.
type s3Fields struct {
	location string // path of the S3Location, e.g. "spec.s3"
	owner    string // the object holding it when that is not the one reconciled, e.g. `PVCBackup "app"`
}

// restoreS3Fields are the s3Fields of the source of pr.
func restoreS3Fields(pr *storagev1.PVCRestore) s3Fields {
	if pr.Spec.Source.S3 != nil {
		return s3Fields{location: "spec.source.s3.location"}
	}
	return s3Fields{location: "spec.s3", owner: fmt.Sprintf("PVCBackup %q", pr.Spec.Source.PVCBackup)}
}

// field names a field of the S3Location, e.g. "spec.s3.credentialsSecretRef".
func (f s3Fields) field(name string) string {
	if f.owner == "" {
		return f.location + "." + name
	}
	return f.location + "." + name + " of " + f.owner
}

// s3Source is a bucket, how to reach it, and the namespace whose Secrets hold its credentials:
// what the S3 calls and mover Jobs of both controllers are built from, whether it comes from a
// PVCBackup's spec or a PVCRestore's spec.source.
type s3Source struct {
	namespace string
	bucket    string
	location  storagev1.S3Location
	// fields names the source's fields in messages.
	fields s3Fields
}

// backupSource is the bucket of a PVCBackup.
func backupSource(pb *storagev1.PVCBackup) s3Source {
	return s3Source{namespace: pb.Namespace, bucket: pb.Spec.S3Bucket, location: pb.Spec.S3, fields: s3Fields{location: "spec.s3"}}
}

// openStore opens the bucket of src with the credentials of its Secret and returns that Secret
// too (for checkPassword). The Secret is read uncached from the API server, or from the S3Cache
// when it was read less than its TTL ago; the ObjectStore is the cache's for the same bucket and
// Secret version. (The mover Jobs take the credentials by secretKeyRef, so a Job never carries
// a stale copy.) A missing Secret, or a missing or empty key, is a Waiting
// CredentialsNotFound, polled every poll; the messages name the source's fields.
func openStore(ctx context.Context, deps Deps, src s3Source) (ObjectStore, *corev1.Secret, error) {
	fields, loc, poll := src.fields, src.location, deps.poll()
	ref := loc.CredentialsSecretRef
	by := fields.field("credentialsSecretRef")
	secret, err := deps.S3Cache.getSecret(ctx, deps.APIReader, types.NamespacedName{Namespace: src.namespace, Name: ref.Name})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil, errclass.Waiting(ReasonCredentialsNotFound, fmt.Sprintf("Secret %q named by %s does not exist", ref.Name, by), poll)
	case err != nil:
		return nil, nil, fmt.Errorf("get credentials Secret: %w", err)
	}
	accessKey, secretKey := credentialKeys(loc)
	for _, k := range []string{accessKey, secretKey} {
		if err := checkSecretKey(secret, k, poll); err != nil {
			return nil, nil, err
		}
	}
	cfg := objectstore.Config{
		Endpoint: loc.Endpoint, Region: loc.Region, Bucket: src.bucket, Insecure: loc.Insecure,
		AccessKey: string(secret.Data[accessKey]), SecretKey: string(secret.Data[secretKey]),
	}
	var caSecret *corev1.Secret
	if ca := loc.CABundleSecretRef; ca != nil {
		by := fields.field("caBundleSecretRef")
		caSecret, err = deps.S3Cache.getSecret(ctx, deps.APIReader, types.NamespacedName{Namespace: src.namespace, Name: ca.Name})
		if err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil, errclass.Waiting(ReasonCredentialsNotFound, fmt.Sprintf("CA bundle Secret %q named by %s does not exist", ca.Name, by), poll)
			}
			return nil, nil, fmt.Errorf("get CA bundle Secret: %w", err)
		}
		if err := checkSecretKey(caSecret, caKey(ca), poll); err != nil {
			return nil, nil, err
		}
		cfg.CABundle = caSecret.Data[caKey(ca)]
	}
	caKeyName := ""
	if loc.CABundleSecretRef != nil {
		caKeyName = caKey(loc.CABundleSecretRef)
	}
	store, err := deps.S3Cache.store(keyOf(cfg, secret, caSecret, accessKey, secretKey, caKeyName), func() (ObjectStore, error) {
		return deps.Stores(cfg)
	})
	if err != nil {
		return nil, nil, errclass.Stalled(ReasonInvalidSpec, fmt.Sprintf("S3 configuration: %v", err))
	}
	return store, secret, nil
}

// checkSecretKey is a Waiting CredentialsNotFound when key of secret is missing or empty, each said
// as such: "has no key" sends the user to fix the key's name, "an empty key" to fix its value.
func checkSecretKey(secret *corev1.Secret, key string, poll time.Duration) error {
	v, ok := secret.Data[key]
	switch {
	case !ok:
		return errclass.Waiting(ReasonCredentialsNotFound, fmt.Sprintf("Secret %q has no key %q", secret.Name, key), poll)
	case len(v) == 0:
		return errclass.Waiting(ReasonCredentialsNotFound, fmt.Sprintf("Secret %q has an empty key %q", secret.Name, key), poll)
	}
	return nil
}

// readManifest fetches and decodes the manifest of a run.
func (r *PVCBackupReconciler) readManifest(ctx context.Context, s *scope, key string) (archive.Manifest, error) {
	store, err := r.storeFor(ctx, s)
	if err != nil {
		return archive.Manifest{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, s3Timeout)
	defer cancel()
	body, err := store.Get(cctx, key)
	if err != nil {
		return archive.Manifest{}, err
	}
	defer body.Close()
	return mover.ReadManifest(body)
}
