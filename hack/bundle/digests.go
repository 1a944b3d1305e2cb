package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// defaultRedisImage is the Redis image the RedisCache CRD defaults spec.image to
// (api/cache/v1beta1.DefaultImage): upstream's, by tag. No build here can compute the digest of
// upstream's image, so it stays by tag, and the CSV claims no disconnected support
// (docs/install.md, "Images by digest").
const defaultRedisImage = "docker.io/library/redis:7.4-alpine"

// digestRef is an image reference by digest: <repository>@sha256:<64 hex>.
var digestRef = regexp.MustCompile(`^[a-z0-9./_-]+(:[0-9]+)?[a-z0-9./_-]*@sha256:[0-9a-f]{64}$`)

// releaseDigests is the part of releases/digests.yaml (hack/catalog/digests.go reads all of it)
// the bundle needs: each release's operator image by digest.
type releaseDigests struct {
	Releases map[string]struct {
		Manager string `json:"manager"`
	} `json:"releases"`
}

// pinnedOperatorImage is the operator image the CSV names: by digest when --manager-digest gives
// one or --digests lists the version (hack/images/build.sh builds the release's image — manager
// and mover — reproducibly from its release commit, and make release pins it), else o.image by
// tag. A pin must be of o.image's repository.
func pinnedOperatorImage(o options) (string, error) {
	pin := o.managerDigest
	if pin == "" && o.digests != "" {
		file := o.digests
		if !filepath.IsAbs(file) {
			file = filepath.Join(o.root, file)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		var d releaseDigests
		if err := yaml.Unmarshal(data, &d); err != nil {
			return "", fmt.Errorf("%s: %w", o.digests, err)
		}
		pin = d.Releases[o.version].Manager
	}
	if pin == "" {
		return o.image, nil
	}
	if !digestRef.MatchString(pin) {
		return "", fmt.Errorf("operator image %q is not <repository>@sha256:<64 hex>", pin)
	}
	if repo, _, _ := strings.Cut(pin, "@"); repo != imageRepository(o.image) {
		return "", fmt.Errorf("operator image %s is not of the repository of %s", pin, o.image)
	}
	return pin, nil
}

// imageRepository is ref without its tag or digest.
func imageRepository(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}
