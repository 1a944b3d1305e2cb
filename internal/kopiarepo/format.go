package kopiarepo

import (
	"fmt"
	"slices"

	"github.com/kopia/kopia/repo/compression"
)

// How a repository cuts files into chunks and compresses them: the two choices that decide
// what a backup stores (docs/benchmarks.md, "Storage: compression and chunking").

// DefaultSplitter is the splitter of the repositories Open creates (Options.Splitter empty):
// content-defined chunks of 0.5 to 2 MiB. kopia's own default, DYNAMIC-4M-BUZHASH (2 to 8 MiB),
// made a backup after 64 scattered 4 KiB rewrites in a VM image upload 2.2 times what restic
// uploads, and one after 1 % of a database's 8 KiB pages were rewritten 91 % of the data; with 1 MiB
// chunks both are restic's bytes (1.01 and 1.00 times; docs/benchmarks.md, "Storage: compression
// and chunking"). The cost: four times the index entries for the same bytes.
const DefaultSplitter = "DYNAMIC-1M-BUZHASH"

// Splitters are the splitters a repository may be created with: kopia's content-defined
// BUZHASH splitters (a chunk boundary moves with the content, so an insertion costs a chunk or
// two) and its fixed-size ones (boundaries at fixed offsets: for images rewritten in place).
var Splitters = []string{
	"DYNAMIC-512K-BUZHASH", "DYNAMIC-1M-BUZHASH", "DYNAMIC-2M-BUZHASH", "DYNAMIC-4M-BUZHASH", "DYNAMIC-8M-BUZHASH",
	"FIXED-512K", "FIXED-1M", "FIXED-2M", "FIXED-4M",
}

// DefaultCompression is the compressor of every source's new chunks (BackupOptions.Compression
// empty): zstd at its default level, restic's own, stores source trees and logs in restic's
// bytes (0.99 and 1.00 times), where s2-default stored 1.4 and 1.6 times as much, for about
// twice s2's CPU on text (docs/benchmarks.md, "Storage: compression and chunking"). Chunks
// written before keep their compression, restore reads all: kopia identifies a chunk by the hash
// of its uncompressed content, so a change of compressor re-uploads nothing.
const DefaultCompression = compression.Name("zstd")

// Compressions are the compressors a backup may use: none, s2 (fast, lighter), zstd at three
// levels (tighter, more CPU) and pgzip.
var Compressions = []string{"none", "s2-default", "s2-better", "zstd-fastest", "zstd", "zstd-better-compression", "pgzip"}

func validSplitter(name string) error {
	if name != "" && !slices.Contains(Splitters, name) {
		return fmt.Errorf("splitter %q: not one of %v", name, Splitters)
	}
	return nil
}

func validCompression(name string) error {
	if name != "" && !slices.Contains(Compressions, name) {
		return fmt.Errorf("compression %q: not one of %v", name, Compressions)
	}
	return nil
}

// Splitter is kopia's name of the splitter the repository was created with (format.ObjectFormat):
// every backup into it cuts files with it, whatever Options.Splitter asked.
func (r *Repo) Splitter() string { return r.splitter }
