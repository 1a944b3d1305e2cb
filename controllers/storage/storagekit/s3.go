package storagekit

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/internal/errclass"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// ClassifyS3Error turns an S3 error into a condition the user can act on. The messages come from
// the S3 server and minio-go, which never include the secret key.
func ClassifyS3Error(err error, bucket string, poll time.Duration) error {
	switch {
	case objectstore.IsAccessDenied(err):
		return errclass.Waiting(ReasonCredentialsRejected, fmt.Sprintf("S3 refused the credentials: %v", err), poll)
	case objectstore.IsNoSuchBucket(err):
		return errclass.Waiting(ReasonBucketNotFound, fmt.Sprintf("bucket %q does not exist", bucket), poll)
	default:
		return errclass.Waiting(ReasonEndpointUnreachable, fmt.Sprintf("S3 endpoint unreachable: %v", err), poll)
	}
}

// S3Fields says, in the messages of OpenStore, where the S3 settings of the object being
// reconciled come from: its own spec.s3 (PVCBackup) or spec.source.s3.location (PVCRestore), or
// the spec.s3 of the PVCBackup a PVCRestore names. A message that names a field the user's object
// does not have sends them looking in the wrong place.
type S3Fields struct {
	Location string // path of the S3Location, e.g. "spec.s3"
	Owner    string // the object holding it when that is not the one reconciled, e.g. `PVCBackup "app"`
}

// field names a field of the S3Location, e.g. "spec.s3.credentialsSecretRef".
func (f S3Fields) Field(name string) string {
	if f.Owner == "" {
		return f.Location + "." + name
	}
	return f.Location + "." + name + " of " + f.Owner
}

// S3Source is a bucket, how to reach it, and the namespace whose Secrets hold its credentials:
// what the S3 calls and mover Jobs of both controllers are built from, whether it comes from a
// PVCBackup's spec or a PVCRestore's spec.source.
type S3Source struct {
	Namespace string
	Bucket    string
	Location  storagev1.S3Location
	// Fields names the source's fields in messages.
	Fields S3Fields
}

// BackupSource is the bucket of a PVCBackup.
func BackupSource(pb *storagev1.PVCBackup) S3Source {
	return S3Source{Namespace: pb.Namespace, Bucket: pb.Spec.S3Bucket, Location: pb.Spec.S3, Fields: S3Fields{Location: "spec.s3"}}
}

// OpenStore opens the bucket of src with the credentials of its Secret and returns that Secret
// too (for CheckPassword). The Secret is read uncached from the API server, or from the S3Cache
// when it was read less than its TTL ago; the ObjectStore is the cache's for the same bucket and
// Secret version. (The mover Jobs take the credentials by secretKeyRef, so a Job never carries
// a stale copy.) A missing Secret, or a missing or empty key, is a Waiting
// CredentialsNotFound, polled every poll; the messages name the source's fields.
func OpenStore(ctx context.Context, deps Deps, src S3Source) (ObjectStore, *corev1.Secret, error) {
	fields, loc, poll := src.Fields, src.Location, deps.Poll()
	ref := loc.CredentialsSecretRef
	by := fields.Field("credentialsSecretRef")
	secret, err := deps.S3Cache.getSecret(ctx, deps.APIReader, types.NamespacedName{Namespace: src.Namespace, Name: ref.Name})
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
		Endpoint: loc.Endpoint, Region: loc.Region, Bucket: src.Bucket, Insecure: loc.Insecure,
		AccessKey: string(secret.Data[accessKey]), SecretKey: string(secret.Data[secretKey]),
	}
	var caSecret *corev1.Secret
	if ca := loc.CABundleSecretRef; ca != nil {
		by := fields.Field("caBundleSecretRef")
		caSecret, err = deps.S3Cache.getSecret(ctx, deps.APIReader, types.NamespacedName{Namespace: src.Namespace, Name: ca.Name})
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
