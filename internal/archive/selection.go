package archive

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"path"
	"strings"
)

// Selection is the part of an archive a restore of some paths extracts (ReadOptions.Only): the
// entries at or under one of the paths, and the directories above them (so they come back with
// their archived owner, mode and times, not as bare directories). The archive is still read
// from its first byte to its last: a tar stream has no index, and its hash must cover it all.
type Selection struct {
	paths []string // slash-separated, relative to the archive's root, none under another
}

// Select is the Selection of paths: slash-separated, relative to the archive's root, none
// under another (mover.DecodePaths makes them so). No path: nil, the whole archive.
func Select(paths []string) *Selection {
	if len(paths) == 0 {
		return nil
	}
	return &Selection{paths: paths}
}

// entryName is an archive entry's name as a slash-separated path relative to the root ("." for
// the root itself): Write names entries "a/b", other tars "./a/b" or "a/b/".
func entryName(name string) string { return path.Clean(name) }

// under reports the path of the selection that name is at or under ("" when none).
func (s *Selection) under(name string) string {
	for _, p := range s.paths {
		if name == p || (strings.HasPrefix(name, p) && name[len(p)] == '/') {
			return p
		}
	}
	return ""
}

// above reports whether name is a directory above a path of the selection (never the root:
// a restore of some paths leaves the volume's root as it is).
func (s *Selection) above(name string) bool {
	if name == "." {
		return false
	}
	for _, p := range s.paths {
		if strings.HasPrefix(p, name) && p[len(name)] == '/' {
			return true
		}
	}
	return false
}

// Has reports whether the entry hdr is extracted: at or under a path, or a directory above one.
func (s *Selection) Has(hdr *tar.Header) bool {
	if s == nil {
		return true
	}
	name := entryName(hdr.Name)
	return s.under(name) != "" || (hdr.Typeflag == tar.TypeDir && s.above(name))
}

// Survey is what a first read of an archive found about a Selection: the whole archive's Stats
// (to check against the manifest), the Stats a Read with the selection reports, and the
// selection's paths that the archive does not hold or that cannot be restored alone.
type Survey struct {
	Whole, Selected Stats
	// Missing are the paths of the selection no entry of the archive is at or under.
	Missing []string
	// Outside are hard links under a path of the selection to a file that is not: the archive
	// holds the file's content once, at the other name, so the link cannot be restored alone
	// (name -> the file's name).
	Outside map[string]string
}

// SurveySelection reads an archive to its end, writing nothing, as Check does, and says what a
// Read with sel would restore. A restore of some paths runs it before it touches the target, so
// a path the archive lacks (or a damaged archive) leaves the target as it was.
func SurveySelection(ctx context.Context, r io.Reader, sel *Selection) (Survey, error) {
	sv := Survey{Outside: map[string]string{}}
	found := map[string]bool{}
	n, sum, err := scan(ctx, r, func(hdr *tar.Header, content io.Reader) error {
		if err := tally(&sv.Whole, hdr); err != nil {
			return err
		}
		if sel.Has(hdr) {
			if err := tally(&sv.Selected, hdr); err != nil {
				return err
			}
			name := entryName(hdr.Name)
			if p := sel.under(name); p != "" {
				found[p] = true
				if hdr.Typeflag == tar.TypeLink && sel.under(entryName(hdr.Linkname)) == "" {
					sv.Outside[name] = entryName(hdr.Linkname)
				}
			}
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		if _, err := io.Copy(io.Discard, cancellable{ctx, content}); err != nil {
			return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
		}
		return nil
	})
	if err != nil {
		return sv, err
	}
	sv.Whole.ArchiveBytes, sv.Whole.SHA256 = n, sum
	sv.Selected.ArchiveBytes, sv.Selected.SHA256 = n, sum
	for _, p := range sel.paths {
		if !found[p] {
			sv.Missing = append(sv.Missing, p)
		}
	}
	return sv, nil
}

// tally counts the entry hdr into st as Read, Check and a selection count it.
func tally(st *Stats, hdr *tar.Header) error {
	switch hdr.Typeflag {
	case tar.TypeDir:
		st.Dirs++
	case tar.TypeReg:
		st.Files++
		st.ContentBytes += hdr.Size
	case tar.TypeSymlink:
		st.Symlinks++
	case tar.TypeLink:
		st.HardLinks++
	case tar.TypeFifo:
		st.FIFOs++
	case tar.TypeChar, tar.TypeBlock:
		st.Skipped++
	case tar.TypeXGlobalHeader:
	default:
		return fmt.Errorf("archive entry %q: unsupported type %q", hdr.Name, hdr.Typeflag)
	}
	return nil
}
