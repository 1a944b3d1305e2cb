package archive

// Stats describes one archive: what it holds and the bytes of its compressed stream. Write and
// Read of the same archive report the same values, except Skipped and Changed, which only Write
// can see.
type Stats struct {
	// Files counts regular files with content; Dirs counts directories, the root included;
	// Symlinks counts symbolic links; HardLinks counts the second and later names of an inode.
	Files, Dirs, Symlinks, HardLinks int64
	// FIFOs counts named pipes: an archive holds them (a restore makes them again, empty).
	FIFOs int64
	// Skipped counts sockets and devices: a backup cannot hold what they are (a socket is a
	// live process's; a device needs privileges a mover does not have to make again).
	Skipped int64
	// Changed counts entries that changed while Write read them: files whose size or mtime
	// moved (their content is cut or zero-padded to the size recorded in their header, so the
	// stream stays valid but that file may be torn) and entries that vanished before they could
	// be read (they are left out).
	Changed int64
	// ContentBytes is the sum of the regular files' sizes, as recorded in their headers.
	ContentBytes int64
	// ArchiveBytes and SHA256 (lowercase hex) describe the compressed stream as written or read.
	ArchiveBytes int64
	SHA256       string
}
