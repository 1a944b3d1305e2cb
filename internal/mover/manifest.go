package mover

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/okgoes/okgoes-operator/internal/archive"
)

// ManifestSuffix ends the key of every manifest: <prefix><backup id>.manifest.json.
const ManifestSuffix = ".manifest.json"

// ErrBadManifest is wrapped by the error of ReadManifest when the object was read but is not a
// manifest; any other error is the reader's (S3's).
var ErrBadManifest = errors.New("not a valid manifest")

// ReadManifest decodes a manifest object.
func ReadManifest(r io.Reader) (archive.Manifest, error) {
	var m archive.Manifest
	data, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return m, err
	}
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&m); err != nil {
		return m, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	return m, nil
}

// CheckBackup reports whether manifest m describes a complete backup whose archive is stored at
// archiveKey with archiveSize bytes: the definition of a usable archive backup that restore,
// verify, retention and "latest" share. A nil error does not prove the archive's content;
// reading it against the manifest does.
func CheckBackup(m archive.Manifest, id, archiveKey string, archiveSize int64) error {
	switch {
	case m.FormatVersion != archive.FormatVersion:
		return fmt.Errorf("manifest format %d is not %d", m.FormatVersion, archive.FormatVersion)
	case m.ID != id:
		return fmt.Errorf("manifest names backup %q, not %q", m.ID, id)
	case m.Archive.Key != archiveKey:
		return fmt.Errorf("manifest describes %s, not %s", m.Archive.Key, archiveKey)
	case archiveSize < 0:
		return fmt.Errorf("archive %s does not exist", archiveKey)
	case archiveSize != m.Archive.Bytes:
		return fmt.Errorf("archive %s has %d bytes, its manifest says %d", archiveKey, archiveSize, m.Archive.Bytes)
	}
	return nil
}
