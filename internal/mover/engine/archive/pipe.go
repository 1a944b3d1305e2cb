package archive

import (
	"io"
	"sync"

	"github.com/okgoes/okgoes-operator/internal/mover"
)

// pipeBuffer is the room between the archive writer and the upload: the upload reads a whole
// part before sending it and then sends it, and with room for a part the writer goes on
// reading, compressing and hashing the volume meanwhile instead of waiting. It costs one part
// of memory more.
const pipeBuffer = mover.DefaultPartSize

// bufferedPipe is io.Pipe with room for a number of bytes: Write returns once its bytes are
// in the buffer, and blocks only while the buffer is full.
type bufferedPipe struct {
	mu       sync.Mutex
	readable sync.Cond // data, or the end of either side
	writable sync.Cond // room, or the end of the reading side
	ring     []byte
	start, n int   // the buffered bytes are ring[start:start+n], wrapping around
	werr     error // the writer's end: io.EOF, or its error
	rerr     error // the reader's end: what Write returns
}

func newBufferedPipe(size int) *bufferedPipe {
	p := &bufferedPipe{ring: make([]byte, size)}
	p.readable.L, p.writable.L = &p.mu, &p.mu
	return p
}

func (p *bufferedPipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	written := 0
	for len(b) > 0 {
		for p.n == len(p.ring) && p.rerr == nil {
			p.writable.Wait()
		}
		switch {
		case p.rerr != nil:
			return written, p.rerr
		case p.werr != nil:
			return written, io.ErrClosedPipe
		}
		end := (p.start + p.n) % len(p.ring)
		k := copy(p.ring[end:end+min(len(p.ring)-end, len(p.ring)-p.n)], b)
		p.n += k
		written += k
		b = b[k:]
		p.readable.Signal()
	}
	return written, nil
}

func (p *bufferedPipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.n == 0 && p.werr == nil && p.rerr == nil {
		p.readable.Wait()
	}
	switch {
	case p.rerr != nil:
		return 0, io.ErrClosedPipe
	case p.n == 0:
		return 0, p.werr
	}
	k := copy(b, p.ring[p.start:p.start+min(p.n, len(p.ring)-p.start)])
	p.start = (p.start + k) % len(p.ring)
	p.n -= k
	p.writable.Signal()
	return k, nil
}

// CloseWrite ends the stream: the reader gets what is buffered, then err (io.EOF when nil).
func (p *bufferedPipe) CloseWrite(err error) {
	if err == nil {
		err = io.EOF
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.werr == nil {
		p.werr = err
	}
	p.readable.Broadcast()
}

// CloseRead ends the reading side: Write returns err from now on, and what is buffered is
// dropped.
func (p *bufferedPipe) CloseRead(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rerr == nil {
		p.rerr = err
	}
	p.n = 0
	p.writable.Broadcast()
	p.readable.Broadcast()
}
