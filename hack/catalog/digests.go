package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// digests is releases/digests.yaml: the images of every release by digest, as
// hack/images/build.sh builds them (the bundle image from releases/<version>, the manager image
// from the release commit), with the Go toolchain the manager digests hold for. `make catalog`
// pins them in catalog/ (`make release-digests` rewrites the file from a build).
type digests struct {
	// Toolchain is the `go env GOVERSION` the manager images were built with: another toolchain
	// builds other bytes.
	Toolchain string `json:"toolchain"`
	// Releases maps a version to its images.
	Releases map[string]releaseImages `json:"releases"`
}

// releaseImages are one release's images, each <repository>@sha256:<hex>.
type releaseImages struct {
	// Bundle is the bundle image: the catalog's image of the bundle.
	Bundle string `json:"bundle"`
	// Manager is the operator image the CSV names by tag (<repository>:v<version>): the catalog's
	// relatedImages name it by this digest instead.
	Manager string `json:"manager"`
}

var digestRef = regexp.MustCompile(`^[a-z0-9./_-]+(:[0-9]+)?[a-z0-9./_-]*@sha256:[0-9a-f]{64}$`)

func loadDigests(file string) (*digests, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var d digests
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	if d.Toolchain == "" {
		return nil, fmt.Errorf("%s: no toolchain", file)
	}
	for v, imgs := range d.Releases {
		for _, ref := range []string{imgs.Bundle, imgs.Manager} {
			if !digestRef.MatchString(ref) {
				return nil, fmt.Errorf("%s: release %s: %q is not <repository>@sha256:<64 hex>", file, v, ref)
			}
		}
	}
	return &d, nil
}

// repository is ref without its digest.
func repository(ref string) string {
	repo, _, _ := strings.Cut(ref, "@")
	return repo
}
