package archive

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestManifestVerifyNamesTheFirstMismatch(t *testing.T) {
	s := Stats{Files: 5, Dirs: 2, Symlinks: 1, HardLinks: 2, ContentBytes: 1000, ArchiveBytes: 400, SHA256: "ab12", Skipped: 3, Changed: 1}
	m := NewManifest("id", "ns", "pvc", "key", s)
	if err := m.Verify(s); err != nil {
		t.Fatalf("Verify of its own stats: %v", err)
	}
	read := s
	read.Skipped, read.Changed = 0, 0 // Read cannot see these; they must not matter
	if err := m.Verify(read); err != nil {
		t.Fatalf("Verify of a restore's stats: %v", err)
	}
	for field, change := range map[string]func(*Stats){
		"archive.sha256": func(s *Stats) { s.SHA256 = "ab13" },
		"archive.bytes":  func(s *Stats) { s.ArchiveBytes++ },
		"files":          func(s *Stats) { s.Files-- },
		"dirs":           func(s *Stats) { s.Dirs++ },
		"symlinks":       func(s *Stats) { s.Symlinks = 0 },
		"hardLinks":      func(s *Stats) { s.HardLinks++ },
		"contentBytes":   func(s *Stats) { s.ContentBytes-- },
	} {
		bad := read
		change(&bad)
		err := m.Verify(bad)
		if !errors.Is(err, ErrMismatch) || !strings.HasPrefix(strings.TrimPrefix(err.Error(), ErrMismatch.Error()+": "), field+":") {
			t.Errorf("%s differs: Verify = %v", field, err)
		}
	}
	// Several differences: the hash is named, as it is what damage changes first.
	bad := read
	bad.Files, bad.SHA256 = 0, "00"
	if err := m.Verify(bad); err == nil || !strings.Contains(err.Error(), "archive.sha256") {
		t.Errorf("Verify = %v, want the sha256 named", err)
	}
}

func TestManifestJSON(t *testing.T) {
	m := NewManifest("2026-12-03-0600", "team-a", "data", "backups/team-a/data/x.tar.zst",
		Stats{Files: 1, Dirs: 2, Symlinks: 3, HardLinks: 4, ContentBytes: 5, ArchiveBytes: 6, SHA256: "ff"})
	m.ScheduledTime = time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	m.StartTime, m.CompletionTime = m.ScheduledTime.Add(time.Second), m.ScheduledTime.Add(time.Minute)
	m.OperatorVersion = "v0.1.0"
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"formatVersion":1`, `"compression":"zstd"`, `"format":"tar-pax"`, `"sha256":"ff"`,
		`"bytes":6`, `"hardLinks":4`, `"contentBytes":5`, `"pvc":"data"`, `"completionTime":"2026-12-03T06:01:00Z"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("manifest JSON lacks %s: %s", want, data)
		}
	}
	var back Manifest
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, m) {
		t.Errorf("JSON round trip changed the manifest:\n got %+v\nwant %+v", back, m)
	}
}
