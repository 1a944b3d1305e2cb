package kopiarepo

import (
	"context"
	"fmt"
	iofs "io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/content"
	"github.com/kopia/kopia/repo/object"
)

// The chunks of a restore's larger files are read pack by pack too, as restic reads every blob:
// each chunk (a piece) is written at its offset in its file when its pack is held (eachByPack).
//
// kopia reads an object one chunk after the other, a ranged GET each. A database's files of
// 128 MiB in 0.5–2 MiB chunks (DefaultSplitter) were 256 ranged GETs each, and the chunks of the
// files backed up at once share the packs: 512 GETs for 2 such files stored in 12 packs, and
// the restore of 1 GiB of database pages took 1.6 × restic's time, which fetches each pack once
// (docs/benchmarks.md). Reading a large file in parallel segments (four readers of 32 MiB each)
// had made as many GETs, only at once.
//
// A file's first piece read (any of them: kopia reads a chunk whole, decrypts it and checks its
// hash when it opens it) creates the file, replacing what was there; the others open it; the
// last one gives it its length (a file ending in zeros ends in a hole), owner, mode and times.
// A file is written by pieces only when its list of chunks (its index object, which planning
// reads as opening the file would) names chunks that follow each other to the file's length,
// each stored in a data pack the index knows; any other file is read whole (restore.go), which
// reports what is wrong with it.

// largeFile is a file restored piece by piece.
type largeFile struct {
	planned
	left atomic.Int64 // pieces not yet written

	mu      sync.Mutex
	created bool
	end     int64 // end of the data written (past it, a hole to the file's length)
}

// piece is a chunk of a large file and where it goes in the file. A plan holds one per chunk of
// the larger files, 64 bytes each: about 64 MiB for a volume of 1 TiB in 1 MiB chunks (the
// index kopia holds for it is about as large).
type piece struct {
	file           *largeFile
	chunk          object.ID
	offset, length int64
}

// planPieces adds the chunks of o, a file, to the plan as pieces of their packs, and says
// whether it did: not when they are not as described above. entries are its chunks (chunksOf).
func (p *readPlan) planPieces(ctx context.Context, rep repo.Repository, o planned, entries []object.IndirectObjectEntry) bool {
	type at struct {
		pack blob.ID
		end  int64
	}
	packs := make([]at, len(entries))
	var next int64
	for i, en := range entries {
		cid, _, direct := en.Object.ContentID()
		if !direct || en.Start != next || en.Length <= 0 {
			return false
		}
		info, err := rep.ContentInfo(ctx, cid)
		if err != nil || !strings.HasPrefix(string(info.PackBlobID), string(content.PackBlobIDPrefixRegular)) {
			return false
		}
		packs[i] = at{info.PackBlobID, int64(info.PackOffset) + int64(info.PackedLength)}
		next += en.Length
	}
	if next != o.entry.Size() || len(entries) == 0 {
		return false
	}
	lf := &largeFile{planned: o}
	lf.left.Store(int64(len(entries)))
	for i, en := range entries {
		pack := packs[i].pack
		if _, seen := p.byPack[pack]; !seen {
			p.order = append(p.order, pack)
			p.byPack[pack] = nil
		}
		p.pieces[pack] = append(p.pieces[pack], piece{file: lf, chunk: en.Object, offset: en.Start, length: en.Length})
		p.extent[pack] = max(p.extent[pack], packs[i].end)
	}
	return true
}

// writePiece reads pc's chunk and writes it into its file at path, skipping the blocks of
// zeros; the file's last piece finishes it. It says whether it finished the file.
func writePiece(ctx context.Context, rep repo.Repository, path string, pc piece) (finished bool, err error) {
	r, err := rep.OpenObject(ctx, pc.chunk) // reads, decrypts and checks the whole chunk
	if err != nil {
		return false, fmt.Errorf("open %q in the snapshot: chunk at %d: %w", pc.file.entry.Name(), pc.offset, err)
	}
	defer r.Close() //nolint:errcheck // read only
	fd, err := pc.file.open(path)
	if err != nil {
		return false, err
	}
	out := fdFile{fd, path}
	bp := writeBuffers.Get().(*[]byte) //nolint:forcetypeassert // the pool's own
	defer writeBuffers.Put(bp)
	n, end, err := copySparse(out, r, *bp, pc.offset, 0)
	if cerr := syscall.Close(fd); err == nil && cerr != nil {
		err = &iofs.PathError{Op: "close", Path: path, Err: cerr}
	}
	if err == nil && n != pc.length {
		err = fmt.Errorf("the chunk at %d holds %d bytes, the file's index says %d", pc.offset, n, pc.length)
	}
	if err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	pc.file.mu.Lock()
	pc.file.end = max(pc.file.end, end)
	pc.file.mu.Unlock()
	if pc.file.left.Add(-1) > 0 {
		return false, nil
	}
	return true, pc.file.finish(path)
}

// open returns a descriptor of the file for writing: the first call creates it (replacing what
// is at path, never writing through a link), the others open it.
func (f *largeFile) open(path string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.created {
		fd, err := createFile(path)
		f.created = err == nil
		return fd, err
	}
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, &iofs.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// finish gives the file at path, all of its pieces written, its length, owner, mode and times.
func (f *largeFile) finish(path string) (err error) {
	fd, err := f.open(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := syscall.Close(fd); err == nil && cerr != nil {
			err = &iofs.PathError{Op: "close", Path: path, Err: cerr}
		}
	}()
	e := f.entry
	if f.end < e.Size() { // ends in a hole
		if err := syscall.Ftruncate(fd, e.Size()); err != nil {
			return &iofs.PathError{Op: "truncate", Path: path, Err: err}
		}
	}
	if err := setOwnerAndMode(fdFile{fd, path}, e); err != nil {
		return err
	}
	return setTimes(path, e.ModTime(), 0)
}
