package kopiarepo

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kopia/kopia/snapshot"
)

// A backup canceled half way (its Job deleted, the mover's context canceled) returns the
// cancellation and leaves a repository that opens; the next backup completes, reuses what the
// canceled one uploaded, and cleans up after it.
func TestCanceledBackupLeavesAWorkingRepository(t *testing.T) {
	const files, fileSize = 12, 4 << 20
	b := newBucket(t)
	cfg := b.config("volumes/big")
	src := bigVolume(t, files, fileSize)

	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	r := openRepo(t, cancelAfterFirstPack(t, cfg, "volumes/big/p", cancel), testPassword)
	_, err := r.Backup(ctx, src, BackupOptions{Source: "shop/big"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled backup returned %v, want context.Canceled", err)
	}
	uploadedBeforeCancel := b.bytesUnder(t, "volumes/big/p")

	// A new connection, as the next mover Job would make.
	r2 := openRepo(t, cfg, testPassword)
	if list, err := r2.List(testContext(t)); err != nil || len(list) != 0 {
		t.Fatalf("after the canceled backup, list = %v, %v; want no snapshot", list, err)
	}
	si := snapshot.SourceInfo{UserName: ClientUser, Host: ClientHost, Path: "shop/big"}
	if kept := sourceSnapshots(t, r2, si); len(kept) != 1 || !strings.HasSuffix(kept[0], ":canceled") {
		t.Errorf("after the canceled backup the source has [%s]; want one incomplete snapshot holding what was uploaded", strings.Join(kept, " "))
	}
	next, err := r2.Backup(testContext(t), src, BackupOptions{Source: "shop/big"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the canceled backup left %d bytes of packs; the next one uploaded %d of %d", uploadedBeforeCancel, next.UploadedBytes, files*fileSize)
	if next.Files != files || next.TotalBytes != files*fileSize {
		t.Errorf("next snapshot holds %d files, %d bytes; want %d, %d", next.Files, next.TotalBytes, files, files*fileSize)
	}
	if uploadedBeforeCancel >= fileSize && next.UploadedBytes > files*fileSize-uploadedBeforeCancel/2 {
		t.Errorf("next backup uploaded %d bytes although %d were already in the bucket", next.UploadedBytes, uploadedBeforeCancel)
	}
	dst := t.TempDir()
	if _, err := r2.Restore(testContext(t), next.ID, dst); err != nil {
		t.Fatal(err)
	}
	assertSameTree(t, src, dst)

	if kept := sourceSnapshots(t, r2, si); len(kept) != 1 || kept[0] != next.ID+":" {
		t.Errorf("the source has [%s]; want only the complete snapshot %s (the canceled one removed)", strings.Join(kept, " "), next.ID)
	}
}

// sourceSnapshots lists every snapshot of the source, incomplete ones too, as "ID:reason".
func sourceSnapshots(t *testing.T, r *Repo, si snapshot.SourceInfo) []string {
	t.Helper()
	mans, err := snapshot.ListSnapshots(testContext(t), r.rep, si)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range mans {
		ids = append(ids, string(m.ID)+":"+m.IncompleteReason)
	}
	return ids
}

// bigVolume is a directory of n files of size random bytes each: large enough that a backup of it
// can be stopped half way.
func bigVolume(t *testing.T, n, size int) string {
	t.Helper()
	src := t.TempDir()
	for i := range n {
		writeFile(t, filepath.Join(src, fmt.Sprintf("f%02d", i)), randomBytes(t, size), 0o644)
	}
	return src
}

// cancelAfterFirstPack returns cfg reached through a proxy that calls cancel once the first
// PUT of a key under packs (a data pack, up to 20 MiB) has been answered, and holds the PUTs
// of the other packs until then: however fast the machine, the backup is canceled with a pack
// in the bucket and before its last one. (Polling the bucket for the first pack let a quick
// backup finish first.)
func cancelAfterFirstPack(t *testing.T, cfg S3Config, packs string, cancel context.CancelFunc) S3Config {
	t.Helper()
	u, err := url.Parse("http://" + cfg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u) // keeps the Host header the client signed
	var first sync.Once
	canceled := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		key := strings.TrimPrefix(req.URL.Path, "/"+cfg.Bucket+"/")
		if req.Method != http.MethodPut || !strings.HasPrefix(key, packs) {
			proxy.ServeHTTP(w, req)
			return
		}
		isFirst := false
		first.Do(func() { isFirst = true })
		if !isFirst {
			select {
			case <-canceled:
			case <-req.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, req)
		if isFirst {
			cancel()
			close(canceled)
		}
	}))
	t.Cleanup(srv.Close)
	cfg.Endpoint = strings.TrimPrefix(srv.URL, "http://")
	return cfg
}
