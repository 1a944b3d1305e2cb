package kopiarepo

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/kopia/kopia/repo/blob"
)

// memoryPacks serves packs from memory to packWindow.hold.
type memoryPacks struct {
	blob.Reader
	packs map[blob.ID][]byte
}

func (m memoryPacks) GetBlob(_ context.Context, id blob.ID, offset, length int64, output blob.OutputBuffer) error {
	output.Reset()
	_, err := output.Write(m.packs[id][offset : offset+length])
	return err
}

// stallingOutput holds the read that writes into it until proceed is closed.
type stallingOutput struct {
	sliceOutput
	writing chan struct{}
	proceed chan struct{}
}

func (o *stallingOutput) Write(p []byte) (int, error) {
	close(o.writing)
	<-o.proceed
	return o.sliceOutput.Write(p)
}

// The readers of a restore copy their chunks out of a held pack at once: one reader in the middle
// of its copy must not hold up the others (they queued on one mutex), and the pack's buffer is
// reused only after every copy out of it ended (a chunk copied from a buffer another pack was
// being fetched into would be another file's bytes; kopia's hash check would catch it, failing
// the restore).
func TestPackWindowReadsAtOnceAndReusesABufferOnlyAfterItsReads(t *testing.T) {
	ctx := context.Background()
	first, second := bytes.Repeat([]byte("A"), 1<<10), bytes.Repeat([]byte("B"), 1<<10)
	src := memoryPacks{packs: map[blob.ID][]byte{"p1": first, "p2": second}}
	w := &packWindow{}
	if err := w.hold(ctx, src, "p1", int64(len(first))); err != nil {
		t.Fatal(err)
	}
	slow := &stallingOutput{writing: make(chan struct{}), proceed: make(chan struct{})}
	slowDone := make(chan bool)
	go func() {
		held, err := w.read("p1", 0, 512, slow)
		slowDone <- held && err == nil
	}()
	<-slow.writing

	fastDone := make(chan []byte)
	go func() {
		var out sliceOutput
		if held, err := w.read("p1", 512, 512, &out); !held || err != nil {
			t.Errorf("second read: held %v, %v", held, err)
		}
		fastDone <- out.b
	}()
	select {
	case got := <-fastDone:
		if !bytes.Equal(got, first[512:]) {
			t.Errorf("second read got %q…", got[:8])
		}
	case <-time.After(30 * time.Second): // a liveness bound, not a speed: it waits for ever on one mutex
		close(slow.proceed)
		t.Fatal("a read waited for another read of the pack to end")
	}

	// release and the hold of the next pack (which takes the released buffer) wait for the
	// copy in flight
	reused := make(chan struct{})
	go func() {
		w.release("p1")
		_ = w.hold(ctx, src, "p2", int64(len(second)))
		close(reused)
	}()
	time.Sleep(100 * time.Millisecond) // give a wrong release the time to take the buffer
	close(slow.proceed)
	if ok := <-slowDone; !ok {
		t.Fatal("the first read failed")
	}
	if !bytes.Equal(slow.b, first[:512]) {
		t.Fatalf("the read in flight copied %q… out of a buffer reused for the next pack", slow.b[:8])
	}
	<-reused
}

// A read the pack window serves is no S3 call, but the stall watch (Guard.Call) still sees it as
// progress: a restore of many small files reads nothing else for as long as a pack lasts.
func TestAHeldPackReadCountsAsActivity(t *testing.T) {
	ctx := context.Background()
	pack := bytes.Repeat([]byte("C"), 1<<10)
	link := &storageLink{window: &packWindow{}}
	var calls, ok int
	link.guard.Call = func() func(error) {
		calls++
		return func(err error) {
			if err == nil {
				ok++
			}
		}
	}
	if err := link.window.hold(ctx, memoryPacks{packs: map[blob.ID][]byte{"p": pack}}, "p", int64(len(pack))); err != nil {
		t.Fatal(err)
	}
	g := &guardedStorage{link: link} // no storage: the read must come from the window
	var out sliceOutput
	if err := g.GetBlob(ctx, "p", 100, 200, &out); err != nil || !bytes.Equal(out.b, pack[100:300]) {
		t.Fatalf("read %d bytes: %v", len(out.b), err)
	}
	if calls != 1 || ok != 1 {
		t.Fatalf("%d calls recorded (%d ended well), want 1", calls, ok)
	}
}
