package archive

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"
)

// Restoring a tree of small files is bound by creating them, and the reader also decompresses
// and parses the stream. So regular files up to smallFileMax are read from the stream into
// memory and written by a writer goroutine while the reader goes on; everything else
// (directories, links, larger files) is written by the reader itself once the writer has
// finished what it holds, so no entry ever races another over the same path or over a
// directory on the way.
//
// One writer, not several: the stream holds a directory's files one after the other, and
// creates in one directory take its lock. Restoring 200,000 files of 4 KiB (1,000 per
// directory) with four writers took 47 s of CPU for 25 s (the base took 18.5 s of CPU); with
// one, 7.6 s of CPU for 6.6 s on a tmpfs, where the base took 10.6 s (docs/benchmarks.md,
// "The archive mover against tar").
const (
	smallFileMax     = 128 << 10
	smallFileWorkers = 1
	// smallFileQueue buffers, each of smallFileMax, are what the files in flight hold: 2.5 MiB.
	smallFileQueue = 20
)

// smallFile is a regular file whose content is in memory, ready to be written.
type smallFile struct {
	name     string // as in the archive, to name it in errors
	path     string
	data     []byte // the content; a buffer of the pool
	mode     uint32 // permission bits with setuid, setgid and sticky
	uid, gid int
	mtime    time.Time
}

// smallFiles writes small files on smallFileWorkers goroutines. Only the reader calls its methods.
type smallFiles struct {
	ctx   context.Context
	opts  ReadOptions
	jobs  chan *smallFile
	free  chan []byte
	wg    sync.WaitGroup // files handed out and not yet written
	mu    sync.Mutex
	err   error        // the first failure of a worker
	found []*smallFile // files whose path was taken, in the order they were handed out
	// inFlight holds the paths handed out since the last wait: a second entry for one of them
	// waits, so that the later entry wins as it would written in order.
	inFlight map[string]struct{}
}

func newSmallFiles(ctx context.Context, opts ReadOptions) *smallFiles {
	s := &smallFiles{ctx: ctx, opts: opts, jobs: make(chan *smallFile), free: make(chan []byte, smallFileQueue),
		inFlight: map[string]struct{}{}}
	for range smallFileQueue {
		s.free <- make([]byte, smallFileMax)
	}
	for range smallFileWorkers {
		go s.work()
	}
	return s
}

// buffer returns a free content buffer, waiting for a worker to release one. Files that found
// their path taken hold theirs until wait replaces them: when they hold them all, it waits.
func (s *smallFiles) buffer() []byte {
	select {
	case b := <-s.free:
		return b
	default:
	}
	s.wait() // afterwards every buffer is free; a failure is returned by the next add
	return <-s.free
}

// release gives a content buffer back.
func (s *smallFiles) release(b []byte) { s.free <- b[:cap(b)] }

// add hands f to a worker; f.data is a buffer from buffer(). It returns an earlier worker's
// failure, if any, instead.
func (s *smallFiles) add(f *smallFile) error {
	if _, ok := s.inFlight[f.path]; ok {
		if err := s.wait(); err != nil {
			s.release(f.data)
			return err
		}
	}
	if err := s.failed(); err != nil {
		s.release(f.data)
		return err
	}
	s.inFlight[f.path] = struct{}{}
	s.wg.Add(1)
	s.jobs <- f
	return nil
}

func (s *smallFiles) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// wait returns when every file handed out is written, and replaces what was in the way of
// the files that found their path taken (in the order they were handed out). It returns the
// first failure.
func (s *smallFiles) wait() error {
	s.wg.Wait()
	clear(s.inFlight)
	s.mu.Lock()
	found, err := s.found, s.err
	s.found = nil
	s.mu.Unlock()
	for _, f := range found {
		if err == nil {
			err = s.replace(f)
		}
		s.release(f.data)
	}
	if err != nil {
		s.fail(err)
	}
	return err
}

// replace removes what is at f's path (a file or symlink, never followed; an empty directory)
// and writes f there.
func (s *smallFiles) replace(f *smallFile) error {
	if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("archive entry %q: %w", f.name, err)
	}
	if err := s.write(f); err != nil {
		return fmt.Errorf("archive entry %q: %w", f.name, err)
	}
	return nil
}

// close stops the workers once everything handed out is written, and returns the first failure.
func (s *smallFiles) close() error {
	err := s.wait()
	close(s.jobs)
	return err
}

func (s *smallFiles) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

func (s *smallFiles) work() {
	for f := range s.jobs {
		err := s.ctx.Err()
		if err == nil {
			err = s.write(f)
		}
		switch {
		case errors.Is(err, fs.ErrExist):
			s.mu.Lock() // the reader replaces what is there itself (wait)
			s.found = append(s.found, f)
			s.mu.Unlock()
		case err != nil:
			s.fail(fmt.Errorf("archive entry %q: %w", f.name, err))
			fallthrough
		default:
			s.release(f.data)
		}
		s.wg.Done()
	}
}

// write creates f — it must not exist — with its content, owner, mode and mtime. It uses the
// descriptor directly: an os.File would first try, and fail, to register a regular file with
// the network poller, one more system call per file.
func (s *smallFiles) write(f *smallFile) error {
	// O_EXCL and O_NOFOLLOW: a file must be created here, not reached through a link.
	fd, err := syscall.Open(f.path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return &fs.PathError{Op: "open", Path: f.path, Err: err}
	}
	err = s.fill(fd, f)
	if cerr := syscall.Close(fd); err == nil && cerr != nil {
		err = &fs.PathError{Op: "close", Path: f.path, Err: cerr}
	}
	if err != nil {
		return err
	}
	return os.Chtimes(f.path, time.Time{}, f.mtime)
}

func (s *smallFiles) fill(fd int, f *smallFile) error {
	if err := writeRuns(fdWriter(fd), f.data, 0, int64(len(f.data))); err != nil {
		return &fs.PathError{Op: "write", Path: f.path, Err: err}
	}
	if s.opts.Chown {
		err := syscall.Fchown(fd, f.uid, f.gid)
		if err != nil && !(s.opts.IgnoreChownEPERM && errors.Is(err, syscall.EPERM)) {
			return &fs.PathError{Op: "chown", Path: f.path, Err: err}
		}
	}
	// After chown, which clears setuid and setgid.
	if err := syscall.Fchmod(fd, f.mode); err != nil {
		return &fs.PathError{Op: "chmod", Path: f.path, Err: err}
	}
	return nil
}

// fdWriter writes to a file descriptor at an offset, and sets its size.
type fdWriter int

func (w fdWriter) WriteAt(p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		n, err := syscall.Pwrite(int(w), p[done:], off+int64(done))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

func (w fdWriter) Truncate(size int64) error { return syscall.Ftruncate(int(w), size) }
