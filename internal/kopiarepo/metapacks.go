package kopiarepo

import (
	"context"
	"strings"
	"sync"

	"github.com/kopia/kopia/repo/blob"
)

// metaPacksLimit bounds the metadata packs a connection holds (metaPacks). A restore's walk
// reads every directory and every chunk list of the snapshot from them; kopia's metadata packs
// are a small part of a repository (a few MiB for a volume of millions of files).
const metaPacksLimit = 64 << 20

// metaPacks holds whole metadata packs (kopia's "q" blobs: directories, chunk lists of large
// files, manifests) in memory for a connection without a disk cache (Options.NoDiskCache): the
// first read of a range of one fetches it whole, later ones are served from memory. kopia's
// own metadata cache does the same on disk, but v0.22.3 turns it on only with a data cache
// (writeConnection), which a restore must not have; without either, each directory and chunk
// list read by a restore's walk was a ranged GET of a few hundred bytes, one after the other:
// 280 GETs for 512 logs of 1 MiB; 1 GiB of logs restored in 1.55 × restic's time, 0.89 ×
// since (docs/benchmarks.md, "Restore: where the time goes", 6.).
// What is served is checked by kopia as any read (decrypted, its id verified): a pack that
// cannot be fetched whole, or a range beyond what it held, is read from S3 as before, which
// reports what is wrong with it.
type metaPacks struct {
	mu    sync.Mutex
	packs map[blob.ID]*metaPack
	order []blob.ID // fetched, oldest first: the first to forget past metaPacksLimit
	bytes int
}

type metaPack struct {
	fetched chan struct{} // closed once b (or nothing, on a failure) is there
	b       []byte
}

// isMetadataPack tells a metadata pack's id.
func isMetadataPack(id blob.ID) bool { return strings.HasPrefix(string(id), "q") }

// read copies a range of metadata pack id into output, fetching the pack whole through get
// the first time; served is false when the range is to be read from S3 instead.
func (m *metaPacks) read(ctx context.Context, id blob.ID, offset, length int64, output blob.OutputBuffer,
	get func(ctx context.Context, id blob.ID, output blob.OutputBuffer) error,
) (served bool, err error) {
	if m == nil || !isMetadataPack(id) || offset < 0 || length < 0 {
		return false, nil
	}
	m.mu.Lock()
	p, ok := m.packs[id]
	if !ok {
		if m.packs == nil {
			m.packs = map[blob.ID]*metaPack{}
		}
		p = &metaPack{fetched: make(chan struct{})}
		m.packs[id] = p
	}
	m.mu.Unlock()
	if !ok {
		m.fetch(ctx, id, p, get)
	}
	select {
	case <-p.fetched:
	case <-ctx.Done():
		return false, nil
	}
	end := offset + length
	if end > int64(len(p.b)) {
		return false, nil
	}
	output.Reset()
	_, err = output.Write(p.b[offset:end])
	return true, err
}

// fetch gets pack id whole into p and keeps it, forgetting the oldest packs past the limit; a
// pack that could not be fetched, or that alone is over the limit, is forgotten at once.
func (m *metaPacks) fetch(ctx context.Context, id blob.ID, p *metaPack, get func(context.Context, blob.ID, blob.OutputBuffer) error) {
	out := &sliceOutput{}
	err := get(ctx, id, out)
	m.mu.Lock()
	defer m.mu.Unlock()
	defer close(p.fetched)
	if err != nil || len(out.b) > metaPacksLimit {
		delete(m.packs, id)
		return
	}
	p.b = out.b
	m.order = append(m.order, id)
	m.bytes += len(p.b)
	for m.bytes > metaPacksLimit {
		old := m.order[0]
		m.order = m.order[1:]
		m.bytes -= len(m.packs[old].b)
		delete(m.packs, old)
	}
}
