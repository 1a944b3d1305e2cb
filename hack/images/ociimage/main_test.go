package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// archiveFiles reads the files of an image archive by name.
func archiveFiles(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = data
	}
}

func blob(t *testing.T, files map[string][]byte, digest string) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
	if !ok {
		t.Fatalf("blob %s missing", digest)
	}
	return b
}

// A bundle image as hack/images/build.sh bundles writes it: the labels land in the image config,
// the files at their paths, and the same inputs give the same bytes (the digest a catalog pins).
func TestLabelsAndReproducibility(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "annotations.yaml")
	if err := os.WriteFile(src, []byte("annotations: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	entries, err := parseEntries([]string{"/metadata/annotations.yaml=" + src}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	labels := []string{"operators.operatorframework.io.bundle.package.v1=okgoes-operator", "operators.operatorframework.io.bundle.channels.v1=stable,fast"}
	var archives [][]byte
	for i := range 2 {
		out := filepath.Join(dir, "image"+string(rune('a'+i))+".tar")
		if err := write(out, "quay.io/okgoes/okgoes-operator-bundle:v0.3.0", "", nil, labels, nil, entries); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		archives = append(archives, data)
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Error("two writes of the same image differ")
	}

	files := archiveFiles(t, filepath.Join(dir, "imagea.tar"))
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	if got := index.Manifests[0].Annotations["io.containerd.image.name"]; got != "quay.io/okgoes/okgoes-operator-bundle:v0.3.0" {
		t.Errorf("image name %q", got)
	}
	var manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(blob(t, files, index.Manifests[0].Digest), &manifest); err != nil {
		t.Fatal(err)
	}
	var config struct {
		Config struct {
			Labels map[string]string
		} `json:"config"`
	}
	if err := json.Unmarshal(blob(t, files, manifest.Config.Digest), &config); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"operators.operatorframework.io.bundle.package.v1": "okgoes-operator", "operators.operatorframework.io.bundle.channels.v1": "stable,fast"}
	if len(config.Config.Labels) != len(want) {
		t.Errorf("labels %v, want %v", config.Config.Labels, want)
	}
	for k, v := range want {
		if config.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, config.Config.Labels[k], v)
		}
	}
	layer := tar.NewReader(bytes.NewReader(blob(t, files, manifest.Layers[0].Digest)))
	found := false
	for {
		hdr, err := layer.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		found = found || hdr.Name == "metadata/annotations.yaml"
	}
	if !found {
		t.Error("metadata/annotations.yaml is not in the layer")
	}

	if err := write(filepath.Join(dir, "bad.tar"), "x/y:z", "", nil, []string{"no-equals-sign"}, nil, entries); err == nil {
		t.Error("a label without = was accepted")
	}
}
