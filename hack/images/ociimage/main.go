// Command ociimage writes a one-layer OCI image archive (an image layout in a tar: oci-layout,
// index.json and sha256 blobs) from files on this machine, without a container engine or a registry.
// `ctr -n k8s.io images import` (and `kind load image-archive`) take the result; the image name
// comes from the io.containerd.image.name annotation of the index.
//
//	ociimage -ref okgoes.local/redis:e2e -o bin/images/redis.tar -user 999 \
//	    -file /usr/bin/redis-cli -file /bin/busybox=/usr/bin/busybox -link /bin/sh=busybox \
//	    -dir /data=1777 -entrypoint redis-server
//
// The archive is reproducible: the same inputs give the same bytes and so the same image digest
// (fixed mtimes, uid/gid 0, sorted entries).
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// entry is one path of the image's file system.
type entry struct {
	name   string // absolute path in the image
	mode   int64  // permission bits (and setuid/sticky)
	kind   byte   // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	source string // file on this machine (regular files)
	target string // symlink target
}

func main() {
	var files, dirs, links, env, labels, entrypoint list
	ref := flag.String("ref", "", "image name, e.g. okgoes.local/redis:e2e")
	out := flag.String("o", "", "archive to write")
	user := flag.String("user", "", "uid[:gid] the image runs as")
	flag.Var(&files, "file", "file to add: /path (same path in the image) or /in/image=/on/host; repeatable")
	flag.Var(&dirs, "dir", "directory to create: /path[=mode in octal, default 0755]; repeatable")
	flag.Var(&links, "link", "symlink to create: /path=target; repeatable")
	flag.Var(&env, "env", "NAME=value of the image config; repeatable")
	flag.Var(&labels, "label", "KEY=value label of the image config; repeatable")
	flag.Var(&entrypoint, "entrypoint", "entrypoint argument; repeatable, in order")
	flag.Parse()
	if *ref == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "ociimage: -ref and -o are required")
		os.Exit(2)
	}
	entries, err := parseEntries(files, dirs, links)
	if err == nil {
		err = write(*out, *ref, *user, env, labels, entrypoint, entries)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func parseEntries(files, dirs, links []string) ([]entry, error) {
	byName := map[string]entry{}
	add := func(e entry) error {
		if !path.IsAbs(e.name) {
			return fmt.Errorf("%s: paths in the image must be absolute", e.name)
		}
		e.name = path.Clean(e.name)
		if old, ok := byName[e.name]; ok && old != e {
			return fmt.Errorf("%s given twice", e.name)
		}
		byName[e.name] = e
		return nil
	}
	for _, f := range files {
		name, src, ok := strings.Cut(f, "=")
		if !ok {
			src = name
		}
		st, err := os.Stat(src) // follows symlinks: the image gets the file's content
		if err != nil {
			return nil, err
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is not a regular file", src)
		}
		if err := add(entry{name: name, kind: tar.TypeReg, source: src, mode: int64(st.Mode().Perm())}); err != nil {
			return nil, err
		}
	}
	for _, d := range dirs {
		name, m, ok := strings.Cut(d, "=")
		mode := int64(0o755)
		if ok {
			v, err := strconv.ParseInt(m, 8, 32)
			if err != nil {
				return nil, fmt.Errorf("-dir %s: mode: %w", d, err)
			}
			mode = v
		}
		if err := add(entry{name: name, kind: tar.TypeDir, mode: mode}); err != nil {
			return nil, err
		}
	}
	for _, l := range links {
		name, target, ok := strings.Cut(l, "=")
		if !ok || target == "" {
			return nil, fmt.Errorf("-link %s: want /path=target", l)
		}
		if err := add(entry{name: name, kind: tar.TypeSymlink, target: target, mode: 0o777}); err != nil {
			return nil, err
		}
	}
	// Parent directories that were not given explicitly.
	for name := range byName {
		for dir := path.Dir(name); dir != "/"; dir = path.Dir(dir) {
			if _, ok := byName[dir]; !ok {
				byName[dir] = entry{name: dir, kind: tar.TypeDir, mode: 0o755}
			}
		}
	}
	entries := make([]entry, 0, len(byName))
	for _, e := range byName {
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	return entries, nil
}

// epoch is the mtime of every file: the archive depends on the content only.
var epoch = time.Unix(0, 0).UTC()

func layerTar(entries []entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: strings.TrimPrefix(e.name, "/"), Mode: e.mode, Typeflag: e.kind, ModTime: epoch, Format: tar.FormatPAX}
		switch e.kind {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeSymlink:
			h.Linkname = e.target
		case tar.TypeReg:
			data, err := os.ReadFile(e.source)
			if err != nil {
				return nil, err
			}
			h.Size = int64(len(data))
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
			if _, err := tw.Write(data); err != nil {
				return nil, err
			}
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func write(out, ref, user string, env, labels, entrypoint []string, entries []entry) error {
	layer, err := layerTar(entries)
	if err != nil {
		return err
	}
	if len(env) == 0 {
		env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	runConfig := map[string]any{
		"User":       user,
		"Env":        env,
		"Entrypoint": entrypoint,
		"WorkingDir": "/",
	}
	if len(labels) > 0 {
		byKey := map[string]string{}
		for _, l := range labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok || k == "" {
				return fmt.Errorf("-label %q: want KEY=value", l)
			}
			byKey[k] = v
		}
		runConfig["Labels"] = byKey // encoding/json sorts the keys: reproducible
	}
	imageConfig := map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config":       runConfig,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{digest(layer)}},
		"history":      []map[string]any{{"created": epoch.Format(time.RFC3339), "created_by": "hack/images/ociimage"}},
	}
	config, err := json.Marshal(imageConfig)
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: digest(config), Size: int64(len(config))},
		"layers":        []descriptor{{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: digest(layer), Size: int64(len(layer))}},
	})
	if err != nil {
		return err
	}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	if strings.LastIndex(ref, ":") < strings.LastIndex(ref, "/") {
		return errors.New("-ref needs a tag (name:tag)")
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []descriptor{{
			MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: digest(manifest), Size: int64(len(manifest)),
			Annotations: map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag},
			Platform:    &platform{Architecture: runtime.GOARCH, OS: "linux"},
		}},
	})
	if err != nil {
		return err
	}

	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	put := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir}); err != nil {
			return err
		}
	}
	blob := func(b []byte) (string, []byte) { return "blobs/sha256/" + strings.TrimPrefix(digest(b), "sha256:"), b }
	for _, f := range [][2]any{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
	} {
		if err := put(f[0].(string), f[1].([]byte)); err != nil {
			return err
		}
	}
	for _, b := range [][]byte{layer, config, manifest} {
		if err := put(blob(b)); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, archive.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	_, err = io.WriteString(os.Stdout, ref+" "+digest(manifest)+"\n")
	return err
}
