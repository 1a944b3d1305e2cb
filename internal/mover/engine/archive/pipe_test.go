package archive

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

func TestBufferedPipeCarriesTheStreamThroughItsRing(t *testing.T) {
	data := make([]byte, 1<<20+123)
	rand.NewChaCha8([32]byte{7}).Read(data)
	p := newBufferedPipe(1000) // not a divisor of any write or read size: every wrap is taken
	go func() {
		rest := data
		for len(rest) > 0 {
			n := min(len(rest), 1+len(rest)%4099)
			if _, err := p.Write(rest[:n]); err != nil {
				p.CloseWrite(err)
				return
			}
			rest = rest[n:]
		}
		p.CloseWrite(nil)
	}()
	got, err := io.ReadAll(p)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes (%v), equal=%v", len(got), err, bytes.Equal(got, data))
	}
}

func TestBufferedPipeEnds(t *testing.T) {
	broken := errors.New("volume unreadable")
	p := newBufferedPipe(16)
	if _, err := p.Write([]byte("buffered")); err != nil {
		t.Fatal(err)
	}
	p.CloseWrite(broken)
	got, err := io.ReadAll(p)
	if string(got) != "buffered" || !errors.Is(err, broken) {
		t.Errorf("after the writer failed: read %q, %v; want the buffered bytes, then its error", got, err)
	}

	stopped := errors.New("upload stopped")
	p = newBufferedPipe(16)
	done := make(chan error, 1)
	go func() { _, err := p.Write(make([]byte, 64)); done <- err }() // fills the ring and waits
	p.CloseRead(stopped)
	if err := <-done; !errors.Is(err, stopped) {
		t.Errorf("a writer blocked on a full ring got %v when the reader stopped, want %v", err, stopped)
	}
}
