// Command catalog renders the file-based catalog (FBC) of the operator from the released bundles
// in releases/<version>/ — what `opm render` and `opm init` write, built on operator-registry's
// own libraries (alpha/action, alpha/declcfg, alpha/property):
//
//	<out>/okgoes-operator/catalog.yaml
//	    olm.package  name, default channel, icon and description from the newest CSV
//	    olm.channel  one channel; every release replaces the one before it and skips the
//	                 range its CSV names (spec.replaces, olm.skipRange)
//	    olm.bundle   one per release, as `opm render <bundle-dir>` renders it (olm.package,
//	                 olm.gvk, olm.bundle.object, relatedImages) plus olm.csv.metadata
//
// With --digests releases/digests.yaml (what `make catalog` passes) every release listed there is
// pinned by digest: its bundle image, and in relatedImages its manager image (the CSV names it by
// tag; the released bundle is not changed). With --bundle-images=false every bundle has an empty
// image, so that OLM installs it from its olm.bundle.object properties and no registry is needed
// (a catalog served by `opm serve`).
// It is a module of its own because operator-registry is built against an older Kubernetes
// release than the operator.
package main

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/sirupsen/logrus"
)

func main() {
	var o options
	var root, out string
	var check bool
	flag.StringVar(&root, "root", "../..", "repository root")
	flag.StringVar(&out, "out", "catalog", "catalog root, relative to --root unless absolute")
	flag.StringVar(&o.bundleImageBase, "bundle-image-base", "", "repository of the bundle images: the bundle of x.y.z is <base>:vx.y.z")
	o.bundleImageRefs = map[string]string{}
	flag.Func("bundle-image", "VERSION=REF: the bundle image of one release, e.g. pinned by digest (repeatable; overrides --bundle-image-base)", func(v string) error {
		version, ref, ok := strings.Cut(v, "=")
		if !ok || version == "" || ref == "" {
			return fmt.Errorf("want VERSION=REF, got %q", v)
		}
		o.bundleImageRefs[version] = ref
		return nil
	})
	flag.BoolVar(&o.bundleImages, "bundle-images", true, "give every bundle its image; false: empty images, OLM installs from olm.bundle.object")
	flag.StringVar(&o.channel, "channel", "", "the catalog's channel (default: the newest release's default channel)")
	var digestsFile string
	flag.StringVar(&digestsFile, "digests", "", "releases/digests.yaml: pin the bundle and manager images of the releases it lists by digest")
	flag.BoolVar(&check, "check", false, "write nothing; fail when the catalog on disk differs from the rendered one")
	flag.Parse()
	if digestsFile != "" {
		d, err := loadDigests(digestsFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "catalog:", err)
			os.Exit(1)
		}
		o.digests = d
	}
	o.releases = filepath.Join(root, "releases")
	if !filepath.IsAbs(out) {
		out = filepath.Join(root, out)
	}
	if err := run(o, out, check); err != nil {
		fmt.Fprintln(os.Stderr, "catalog:", err)
		os.Exit(1)
	}
}

func run(o options, out string, check bool) error {
	if o.bundleImages && o.bundleImageBase == "" && len(o.bundleImageRefs) == 0 {
		return fmt.Errorf("--bundle-image-base or --bundle-image is required unless --bundle-images=false")
	}
	// The bundle loader logs at info level about optional files a bundle does not have.
	logrus.SetLevel(logrus.WarnLevel)
	cfg, notes, err := render(context.Background(), o)
	if err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(os.Stderr, "catalog: note:", n)
	}
	data, err := encode(cfg)
	if err != nil {
		return err
	}
	// What is written must pass the validation of `opm validate`.
	if err := validate(data); err != nil {
		return fmt.Errorf("the rendered catalog is invalid: %w", err)
	}
	file := catalogFile(out, cfg.Packages[0].Name)
	if check {
		old, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if string(old) != string(data) {
			return fmt.Errorf("%s is out of date: run make catalog", file)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return err
	}
	fmt.Printf("catalog: wrote %s (%d bundles, channel %s)\n", file, len(cfg.Bundles), cfg.Channels[0].Name)
	return nil
}

func templateParse(s string) (*template.Template, error) {
	return template.New("bundle-image").Option("missingkey=error").Parse(s)
}

func decodeBase64(s string) ([]byte, error) {
	return base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), ""))
}
