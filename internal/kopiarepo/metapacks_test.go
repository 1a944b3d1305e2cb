package kopiarepo

import (
	"context"
	"testing"

	"github.com/kopia/kopia/repo/blob"
)

// metaPacks serves only what it fetched whole: a failed fetch, a range past the pack and a data
// pack go to S3 (served false), so that S3 reports what is wrong; it fetches a pack once, and
// forgets the oldest past metaPacksLimit.
func TestMetaPacksServeOnlyWhatTheyHold(t *testing.T) {
	ctx := context.Background()
	gets := map[blob.ID]int{}
	packs := map[blob.ID][]byte{"qa": []byte("0123456789"), "qbig": make([]byte, metaPacksLimit-4), "qc": []byte("abc")}
	get := func(_ context.Context, id blob.ID, out blob.OutputBuffer) error {
		gets[id]++
		b, ok := packs[id]
		if !ok {
			return blob.ErrBlobNotFound
		}
		_, err := out.Write(b)
		return err
	}
	m := &metaPacks{}
	read := func(id blob.ID, offset, length int64) (string, bool) {
		out := &sliceOutput{}
		served, err := m.read(ctx, id, offset, length, out, get)
		if err != nil {
			t.Fatal(err)
		}
		return string(out.b), served
	}
	for range 3 {
		if got, served := read("qa", 2, 3); !served || got != "234" {
			t.Errorf("read qa[2:5] = %q, %v; want 234 from memory", got, served)
		}
	}
	if gets["qa"] != 1 {
		t.Errorf("qa fetched %d times, want once", gets["qa"])
	}
	if _, served := read("qa", 8, 3); served {
		t.Error("a range past the end of a held pack was served; S3 must answer it")
	}
	if _, served := read("qmissing", 0, 1); served {
		t.Error("a pack that could not be fetched was served")
	}
	if _, served := read("qmissing", 0, 1); served || gets["qmissing"] != 2 {
		t.Errorf("a failed fetch was kept (fetched %d times)", gets["qmissing"])
	}
	if _, served := read("pdata", 0, 1); served || gets["pdata"] != 0 {
		t.Error("a data pack went through the metadata packs")
	}
	read("qbig", 0, 1) // past the limit with qa: qa is forgotten
	read("qc", 0, 1)
	if m.bytes > metaPacksLimit {
		t.Errorf("holds %d bytes, over the limit %d", m.bytes, metaPacksLimit)
	}
	read("qa", 0, 1)
	if gets["qa"] != 2 {
		t.Errorf("qa fetched %d times, want again after it was forgotten", gets["qa"])
	}
}
