package kopiarepo

import (
	"context"
	"errors"
	"fmt"

	"github.com/kopia/kopia/repo"
)

// ChangePassword makes password the repository's password, as `kopia repository
// change-password` does: kopia re-encrypts the repository's format (kopia.repository) and
// storage configuration (kopia.blobcfg) with a key derived from the new password and rewrites
// both blobs. The contents, and so every snapshot, are untouched: they are encrypted with keys
// the format holds, not with the password. From then on only the new password opens the
// repository, for this client too (Heal's second connection included).
//
// kopia writes the two blobs one after the other: a process killed between the two PUTs leaves
// kopia.blobcfg under the new key and kopia.repository under the old one (docs/kopia.md).
func (r *Repo) ChangePassword(ctx context.Context, password string) error {
	if password == "" {
		return errors.New("change the repository password: the new password is empty")
	}
	dr, ok := r.rep.(repo.DirectRepository)
	if !ok {
		return errors.New("changing the repository password needs a direct connection")
	}
	if err := dr.FormatManager().ChangePassword(r.kopiaContext(ctx), password); err != nil {
		return fmt.Errorf("change the repository password: %w", err)
	}
	r.password = password
	return nil
}
