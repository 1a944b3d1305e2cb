package archive

import (
	"fmt"
	"time"
)

// FormatVersion is the manifest format written by this version.
const FormatVersion = 1

// Manifest describes one backup. It is written last, next to its archive: a backup exists only
// when its manifest does, so a run that failed half-way can never pass for a backup.
type Manifest struct {
	FormatVersion int    `json:"formatVersion"`
	ID            string `json:"id"`
	Source        struct {
		Namespace string `json:"namespace"`
		PVC       string `json:"pvc"`
	} `json:"source"`
	ScheduledTime  time.Time `json:"scheduledTime"`
	StartTime      time.Time `json:"startTime"`
	CompletionTime time.Time `json:"completionTime"`
	Archive        struct {
		Key         string `json:"key"`
		Compression string `json:"compression"`
		Format      string `json:"format"`
		Bytes       int64  `json:"bytes"`
		SHA256      string `json:"sha256"`
	} `json:"archive"`
	Files           int64  `json:"files"`
	Dirs            int64  `json:"dirs"`
	Symlinks        int64  `json:"symlinks"`
	HardLinks       int64  `json:"hardLinks"`
	ContentBytes    int64  `json:"contentBytes"`
	OperatorVersion string `json:"operatorVersion,omitempty"`
}

// NewManifest describes the archive at key that Write reported as s.
func NewManifest(id, namespace, pvc, key string, s Stats) Manifest {
	var m Manifest
	m.FormatVersion, m.ID = FormatVersion, id
	m.Source.Namespace, m.Source.PVC = namespace, pvc
	m.Archive.Key, m.Archive.Compression, m.Archive.Format = key, "zstd", "tar-pax"
	m.Archive.Bytes, m.Archive.SHA256 = s.ArchiveBytes, s.SHA256
	m.Files, m.Dirs, m.Symlinks, m.HardLinks, m.ContentBytes = s.Files, s.Dirs, s.Symlinks, s.HardLinks, s.ContentBytes
	return m
}

// Verify compares what Read reported with the manifest and names the first difference.
func (m Manifest) Verify(s Stats) error {
	checks := []struct {
		field     string
		want, got any
	}{
		{"archive sha256", m.Archive.SHA256, s.SHA256},
		{"archive bytes", m.Archive.Bytes, s.ArchiveBytes},
		{"files", m.Files, s.Files},
		{"directories", m.Dirs, s.Dirs},
		{"symlinks", m.Symlinks, s.Symlinks},
		{"hard links", m.HardLinks, s.HardLinks},
		{"content bytes", m.ContentBytes, s.ContentBytes},
	}
	for _, c := range checks {
		if c.want != c.got {
			return fmt.Errorf("%s: manifest says %v, archive has %v", c.field, c.want, c.got)
		}
	}
	return nil
}
