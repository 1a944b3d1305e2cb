// Package kopiarepo keeps volume backups in a kopia repository on S3: content-defined chunks,
// deduplicated across every backup in the repository, encrypted with a key derived from a
// password, so that a second backup of a volume uploads only what changed.
//
// It embeds kopia (github.com/kopia/kopia, Apache-2.0) as a library, the way Velero does, and
// knows nothing of Kubernetes: the mover opens a *Repo, backs a directory up or restores one,
// and closes it. A repository it creates is an ordinary kopia repository, which the stock kopia
// CLI of the same version opens (docs/kopia.md has the command).
//
// # Choices made for kopia
//
//   - Every client connects as one identity (ClientIdentity), whatever pod it runs in, so the
//     maintenance owner never changes and a backup finds the previous snapshot of its source
//     (kopia keys both on user@host).
//   - The snapshot policy stored for each source keeps every snapshot (retention counts at
//     the maximum): the operator has its own retention, and kopia applies its own, which
//     otherwise deletes all but ~10 recent snapshots, at every checkpoint of a long backup.
//   - .kopiaignore files are not honoured: a volume backup takes every file.
//   - A backup in which any entry could not be read fails, and its snapshot is not saved
//     (kopia would otherwise save a snapshot with holes and report the holes on the side).
//   - kopia's local state (its config file, which holds the S3 credentials, and its cache) lives
//     in a work directory: the caller's cache directory, or a temporary one removed at Close.
//   - kopia's default of exiting the process on a fatal repository error is replaced by an
//     error log.
//   - A manifest content kopia cannot read is skipped instead of failing every manifest lookup,
//     and a backup heals the repository first: a lost index rebuilt from the packs, lost or
//     corrupt contents dropped from the index to be uploaded again, a sample of the packs read
//     back (heal.go).
package kopiarepo
