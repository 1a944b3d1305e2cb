package backupcatalog

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
)

// Each way a location cannot be read is its own Ready=False reason, whose message names the cause,
// polled every poll interval (1 s in the stories) and never a reconcile error (no hot loop, no
// backoff to hours); the credentials never appear in status.
func TestCatalogSaysPreciselyWhyALocationCannotBeRead(t *testing.T) {
	w := newWorld(t)
	w.backupNow(w.KopiaBackup("db", "@daily"), storagetest.Volume(t))
	wrongKey := w.namespace("wrong-key-", map[string]string{"AWS_ACCESS_KEY_ID": w.MinIO.AccessKey, "AWS_SECRET_ACCESS_KEY": "not-the-secret-key",
		storagev1.DefaultRepositoryPasswordKey: "x"})
	noPassword := w.namespace("no-password-", map[string]string{"AWS_ACCESS_KEY_ID": w.MinIO.AccessKey, "AWS_SECRET_ACCESS_KEY": w.MinIO.SecretKey})

	for _, tc := range []struct {
		name       string
		in         *world
		edit       func(*storagev1.BackupCatalog)
		reason     string
		message    string
		sourcesToo bool // the location was read: its backups are listed
	}{
		{"no Secret", w, func(bc *storagev1.BackupCatalog) { bc.Spec.Location.CredentialsSecretRef.Name = "nope" },
			storagekit.ReasonCredentialsNotFound, `Secret "nope" named by spec.location.credentialsSecretRef does not exist`, false},
		{"wrong secret key", wrongKey, nil, storagekit.ReasonCredentialsRejected, "S3 refused the credentials", false},
		{"no bucket", w, func(bc *storagev1.BackupCatalog) { bc.Spec.Bucket = "no-such-bucket" },
			storagekit.ReasonBucketNotFound, `bucket "no-such-bucket" does not exist`, false},
		{"endpoint down", w, func(bc *storagev1.BackupCatalog) { bc.Spec.Location.Endpoint = "127.0.0.1:1" },
			storagekit.ReasonEndpointUnreachable, "S3 endpoint unreachable", false},
		{"kopia backups but no password", noPassword, nil, storagekit.ReasonRepositoryPasswordMissing,
			`has no key "KOPIA_PASSWORD": 1 of the backups found are kopia backups`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var edits []func(*storagev1.BackupCatalog)
			if tc.edit != nil {
				edits = append(edits, tc.edit)
			}
			bc := tc.in.catalog(strings.ToLower(strings.ReplaceAll(tc.name, " ", "-")), edits...)
			res := tc.in.reconcileCatalog(bc)
			c := meta.FindStatusCondition(bc.Status.Conditions, storagev1.ConditionReady)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) {
				t.Fatalf("Ready: %+v, want False %s saying %q", c, tc.reason, tc.message)
			}
			if strings.Contains(c.Message, w.MinIO.SecretKey) || strings.Contains(c.Message, "not-the-secret-key") {
				t.Errorf("the message shows a secret key: %s", c.Message)
			}
			if res.RequeueAfter != time.Second {
				t.Errorf("requeue %+v, want the poll interval", res)
			}
			if listed := len(bc.Status.Sources) == 1 && bc.Status.Backups == 1; listed != tc.sourcesToo {
				t.Errorf("sources %+v, backups %d: listed %v, want %v", bc.Status.Sources, bc.Status.Backups, listed, tc.sourcesToo)
			}
			// Still failing: read again at the next poll, not at the refresh interval.
			if res := tc.in.reconcileCatalog(bc); res.RequeueAfter != time.Second {
				t.Errorf("second reconcile: %+v, want the poll interval", res)
			}
		})
	}
}

// slowListing is the real MinIO store whose recursive listing (only the kopia repository's
// objects are listed recursively) answers only when its context ends: a repository too large to
// list in time.
type slowListing struct{ storagekit.ObjectStore }

func (s slowListing) List(ctx context.Context, prefix string) ([]objectstore.ObjectInfo, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A kopia repository whose objects cannot be listed in time leaves its size unknown (unset) and
// still lists its backups: the catalog is Ready, not EndpointUnreachable.
func TestCatalogOfARepositoryTooLargeToSizeStillListsItsBackups(t *testing.T) {
	w := newWorld(t)
	w.backupNow(w.KopiaBackup("db", "@daily"), storagetest.Volume(t))
	defer func(d time.Duration) { repositorySizeTimeout = d }(repositorySizeTimeout)
	repositorySizeTimeout = 100 * time.Millisecond
	w.stores = func(cfg objectstore.Config) (storagekit.ObjectStore, error) {
		s, err := storagekit.MinioStores(cfg)
		return slowListing{s}, err
	}
	bc := w.catalog("slow")
	w.reconcileCatalog(bc)
	c := meta.FindStatusCondition(bc.Status.Conditions, storagev1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionTrue || len(bc.Status.Sources) != 1 || bc.Status.Backups != 1 {
		t.Fatalf("Ready %+v, status %+v", c, bc.Status)
	}
	if got := bc.Status.Sources[0].RepositoryBytes; got != nil {
		t.Errorf("repositoryBytes %d, want unset: the repository could not be listed", *got)
	}
}
