package storagekit

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/okgoes/okgoes-operator/internal/archive"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// checkKopia: what the repository record says of one kopia manifest.
func TestCheckKopiaJudgesAManifestByTheRecord(t *testing.T) {
	const id, snap = "20261203T010000Z", "k1"
	m := archive.Manifest{ID: id, Engine: mover.EngineKopia, Kopia: &archive.KopiaSnapshot{SnapshotID: snap}}
	record := func(edit func(*mover.RepositoryRecord)) *mover.RepositoryRecord {
		rec := &mover.RepositoryRecord{Time: time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC), RunID: "20261203T020000Z",
			Manifests: []string{id}, Snapshots: map[string]mover.RecordedSnapshot{snap: {Backup: id}}}
		if edit != nil {
			edit(rec)
		}
		return rec
	}
	for _, tc := range []struct {
		name    string
		rec     *mover.RepositoryRecord
		problem string // "" restorable
		lost    bool   // counts against the repository's health
	}{
		{name: "no record yet (a repository no run of this version listed): the manifest counts", rec: nil},
		{name: "listed with its snapshot", rec: record(nil)},
		{name: "written after the listing", rec: record(func(r *mover.RepositoryRecord) { r.Manifests = nil }), problem: "not checked against the kopia repository yet"},
		{name: "snapshot not in the repository", rec: record(func(r *mover.RepositoryRecord) { r.Snapshots = nil }), problem: "is not in the repository", lost: true},
		{name: "snapshot of another backup", rec: record(func(r *mover.RepositoryRecord) {
			r.Snapshots[snap] = mover.RecordedSnapshot{Backup: "20261203T000000Z"}
		}),
			problem: "belongs to backup 20261203T000000Z"},
		{name: "snapshot lost data", rec: record(func(r *mover.RepositoryRecord) {
			r.Snapshots[snap] = mover.RecordedSnapshot{Backup: id, Problem: "content c1 was in blob p1, which is lost"}
		}),
			problem: "blob p1, which is lost", lost: true},
		{name: "snapshots cannot be listed", rec: record(func(r *mover.RepositoryRecord) { r.Snapshots, r.Unlisted = nil, "BLOB not found" }), problem: "cannot be read"},
		{name: "a record that does not decode", rec: &mover.RepositoryRecord{Unlisted: "the repository record does not decode"}, problem: "does not decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkKopia(m, tc.rec)
			switch {
			case tc.problem == "" && err != nil:
				t.Errorf("got %v, want restorable", err)
			case tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)):
				t.Errorf("got %v, want a problem with %q", err, tc.problem)
			case errors.Is(err, errSnapshotLost) != tc.lost:
				t.Errorf("got %v: lost = %v, want %v", err, errors.Is(err, errSnapshotLost), tc.lost)
			}
		})
	}
}
