// Command bundle writes the OLM bundle of the operator — what `operator-sdk generate bundle`
// writes — from the kustomize output of config/manifests and the samples, without the
// operator-sdk CLI:
//
//	bundle/manifests/   the ClusterServiceVersion, the CRDs and the other objects OLM installs
//	bundle/metadata/annotations.yaml
//	bundle/tests/scorecard/config.yaml
//	bundle.Dockerfile
//
// Every field of the CSV comes from the base in config/manifests/bases, the kustomize output
// (install strategy, permissions, CRDs), config/samples (alm-examples), the descriptor markers of
// api/ (descriptors.go) and config/manifests/icon.svg (the icon).
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	var o options
	flag.StringVar(&o.root, "root", "../..", "repository root")
	flag.StringVar(&o.version, "version", "", "bundle version (semver, no v)")
	flag.StringVar(&o.image, "image", "", "operator image")
	flag.StringVar(&o.replaces, "replaces", "", "CSV name this version replaces (empty for the first release)")
	flag.StringVar(&o.skipRange, "skip-range", "", "olm.skipRange, e.g. '>=0.1.0 <0.2.0'")
	flag.StringVar(&o.createdAt, "created-at", "", "RFC3339 createdAt, pinned per version")
	flag.StringVar(&o.channels, "channels", "stable", "channels")
	flag.StringVar(&o.defaultChannel, "default-channel", "stable", "default channel")
	flag.StringVar(&o.digests, "digests", "", "releases/digests.yaml (relative to --root unless absolute): pins the operator image of --version by digest when it lists that version")
	flag.StringVar(&o.managerDigest, "manager-digest", "", "the operator image by digest (<repository>@sha256:<hex>), as hack/images/build.sh releases built it; overrides --digests")
	flag.Parse()
	if err := write(o); err != nil {
		fmt.Fprintln(os.Stderr, "bundle:", err)
		os.Exit(1)
	}
}
