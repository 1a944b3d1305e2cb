// Command ocipush pushes the OCI image archives of hack/images/build.sh (one-image OCI layouts in
// a tar) into a registry, as `docker push` or `crane push` would, with oras-go: no container
// engine. The local cluster's registry (hack/local-cluster.sh) serves TLS with a certificate of the
// cluster CA, which -ca names.
//
//	ocipush [-ca ca.crt] [-plain-http] ARCHIVE=REGISTRY/REPOSITORY:TAG ...
//
// It prints "REGISTRY/REPOSITORY:TAG sha256:<manifest digest>" per image.
package main

import (
	"archive/tar"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/registry/remote"
)

func main() {
	ca := flag.String("ca", "", "PEM file of the CA that signed the registry's certificate (default: the system's)")
	plainHTTP := flag.Bool("plain-http", false, "talk plain HTTP to the registry")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: ocipush [-ca ca.crt] [-plain-http] ARCHIVE=REGISTRY/REPOSITORY:TAG ...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	client, err := httpClient(*ca)
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, arg := range flag.Args() {
		archive, ref, ok := strings.Cut(arg, "=")
		if !ok {
			fail(fmt.Errorf("%q: want ARCHIVE=REFERENCE", arg))
		}
		digest, err := push(ctx, client, *plainHTTP, archive, ref)
		if err != nil {
			fail(fmt.Errorf("push %s to %s: %w", archive, ref, err))
		}
		fmt.Println(ref, digest)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ocipush:", err)
	os.Exit(1)
}

func httpClient(caFile string) (*http.Client, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate", caFile)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: transport}, nil
}

// push copies the one image of archive (its index.json's only manifest, with its config and
// layers) to ref and tags it; it returns the manifest digest.
func push(ctx context.Context, client *http.Client, plainHTTP bool, archive, ref string) (string, error) {
	desc, err := imageOf(archive)
	if err != nil {
		return "", err
	}
	src, err := oci.NewFromTar(ctx, archive)
	if err != nil {
		return "", err
	}
	repo, err := remote.NewRepository(ref)
	if err != nil {
		return "", err
	}
	repo.Client = client
	repo.PlainHTTP = plainHTTP
	tag := repo.Reference.Reference
	if tag == "" || strings.HasPrefix(tag, "sha256:") {
		return "", errors.New("the reference needs a tag")
	}
	if err := oras.CopyGraph(ctx, src, repo, desc, oras.DefaultCopyGraphOptions); err != nil {
		return "", err
	}
	if err := repo.Tag(ctx, desc, tag); err != nil {
		return "", err
	}
	return desc.Digest.String(), nil
}

// imageOf reads the descriptor of the single manifest in the archive's index.json.
func imageOf(archive string) (ocispec.Descriptor, error) {
	f, err := os.Open(archive)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return ocispec.Descriptor{}, errors.New("no index.json")
		}
		if err != nil {
			return ocispec.Descriptor{}, err
		}
		if strings.TrimPrefix(h.Name, "./") != ocispec.ImageIndexFile {
			continue
		}
		var index ocispec.Index
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("index.json: %w", err)
		}
		if len(index.Manifests) != 1 {
			return ocispec.Descriptor{}, fmt.Errorf("index.json lists %d manifests, want 1", len(index.Manifests))
		}
		return index.Manifests[0], nil
	}
}
