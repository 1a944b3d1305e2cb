package kopiarepo

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/snapshot"
	"github.com/kopia/kopia/snapshot/policy"
)

// kopia applies a source's retention policy by itself, at every checkpoint of a long upload,
// and its default policy would delete some of twelve snapshots taken in a row. The policy Backup
// stores keeps them all: only the operator's retention deletes snapshots.
func TestKopiaRetentionNeverDeletesSnapshots(t *testing.T) {
	b := newBucket(t)
	r := openRepo(t, b.config("volumes/db"), testPassword)
	ctx := testContext(t)
	src := t.TempDir()
	for i := range 12 {
		writeFile(t, filepath.Join(src, "counter"), []byte{byte(i)}, 0o644)
		if _, err := r.Backup(ctx, src, BackupOptions{Source: "shop/db"}); err != nil {
			t.Fatal(err)
		}
	}

	ours := snapshot.SourceInfo{UserName: ClientUser, Host: ClientHost, Path: "shop/db"}
	if expired := applyRetention(t, r, ours, true); len(expired) != 0 {
		t.Errorf("kopia's retention deleted %d of our snapshots", len(expired))
	}
	if list, err := r.List(ctx); err != nil || len(list) != 12 {
		t.Fatalf("list holds %d snapshots (%v), want all 12", len(list), err)
	}

	// The same twelve snapshots under kopia's default policy (a dry run on a copy of the
	// source without our policy): the threat is real.
	if err := repo.WriteSession(ctx, r.rep, repo.WriteSessionOptions{}, func(ctx context.Context, w repo.RepositoryWriter) error {
		return policy.RemovePolicy(ctx, w, ours)
	}); err != nil {
		t.Fatal(err)
	}
	if expired := applyRetention(t, r, ours, false); len(expired) == 0 {
		t.Error("kopia's default retention would keep all twelve snapshots; this test no longer proves anything")
	} else {
		t.Logf("kopia's default retention would delete %d of the 12 snapshots", len(expired))
	}
}

func applyRetention(t *testing.T, r *Repo, si snapshot.SourceInfo, reallyDelete bool) []string {
	t.Helper()
	var expired []string
	err := repo.WriteSession(testContext(t), r.rep, repo.WriteSessionOptions{}, func(ctx context.Context, w repo.RepositoryWriter) error {
		ids, err := policy.ApplyRetentionPolicy(ctx, w, si, reallyDelete)
		for _, id := range ids {
			expired = append(expired, string(id))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return expired
}
