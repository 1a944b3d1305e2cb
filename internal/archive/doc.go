// Package archive is the on-disk format of a volume backup: a PAX tar of a directory tree,
// compressed with zstd, streamed to any io.Writer by Write and extracted from any io.Reader by
// Read, plus the JSON Manifest that is stored next to each archive. It knows nothing about S3:
// the caller pipes the stream into an upload or out of a download.
//
// # Memory
//
// Memory does not grow with the size of the volume or of its files, so a backup Job can run
// with a small fixed limit (measured: about 19 MiB allocated by a Write, 10 MiB by a Read,
// whatever the data):
//   - Write holds one zstd encoder on one goroutine with an 8 MiB window (a 16 MiB history
//     buffer plus match tables), one 256 KiB copy buffer, the names in the directory being
//     archived and in its ancestors, and the first name of every inode that has several
//     (needed to emit hard links).
//   - Read holds one zstd decoder on one goroutine, which refuses frames that need a window
//     above 8 MiB, one 1 MiB copy buffer, up to 20 small files (≤ 128 KiB each) on their way
//     to the writer goroutine (smallfiles.go), and the name, mode, owner and mtime of every
//     restored directory, which are applied in a final pass.
//
// # Stream
//
// Entries come in lexical order, depth first, starting with the root directory itself as "./",
// so one tree always gives the same bytes. Owners are numeric only; access and change times are
// not recorded, since they differ between reads of the same tree.
package archive
