package main

import (
	"fmt"
	"strings"
)

// metadataFiles are the bundle's annotations, its scorecard configuration and bundle.Dockerfile,
// with the same labels operator-sdk writes.
func metadataFiles(o options) []file {
	labels := [][2]string{
		{"operators.operatorframework.io.bundle.mediatype.v1", "registry+v1"},
		{"operators.operatorframework.io.bundle.manifests.v1", "manifests/"},
		{"operators.operatorframework.io.bundle.metadata.v1", "metadata/"},
		{"operators.operatorframework.io.bundle.package.v1", packageName},
		{"operators.operatorframework.io.bundle.channels.v1", o.channels},
		{"operators.operatorframework.io.bundle.channel.default.v1", o.defaultChannel},
		{"operators.operatorframework.io.test.mediatype.v1", "scorecard+v1"},
		{"operators.operatorframework.io.test.config.v1", "tests/scorecard/"},
	}
	annotations := "annotations:\n"
	dockerfile := "FROM scratch\n\n# Core bundle labels.\n"
	for _, l := range labels {
		annotations += fmt.Sprintf("  %s: %s\n", l[0], l[1])
		dockerfile += fmt.Sprintf("LABEL %s=%s\n", l[0], l[1])
	}
	dockerfile += "\n# Copy files to locations specified by labels.\n" +
		"COPY bundle/manifests /manifests/\nCOPY bundle/metadata /metadata/\nCOPY bundle/tests/scorecard /tests/scorecard/\n"
	return []file{
		{"bundle/metadata/annotations.yaml", []byte(annotations)},
		{"bundle/tests/scorecard/config.yaml", []byte(scorecardConfig(o.image))},
		{"bundle.Dockerfile", []byte(dockerfile)},
	}
}

// okgoesScorecardTests are the tests of this operator's own scorecard image (scorecard/, make
// scorecard-image); the scorecard module's tests check that the list and the binary agree.
var okgoesScorecardTests = []string{
	"alm-examples-have-spec", "crds-have-validation", "crds-have-resources",
	"descriptors-cover-samples", "samples-ready", "invalid-rejected",
}

// scorecardConfig runs the standard basic and OLM suites of operator-sdk's scorecard, then the
// okgoes suite from the scorecard image released with the operator image (same registry and tag).
func scorecardConfig(operatorImage string) string {
	image := strings.Replace(operatorImage, "/okgoes-operator:", "/okgoes-operator-scorecard:", 1)
	cfg := standardScorecardStage + "- parallel: true\n  tests:\n"
	for _, name := range okgoesScorecardTests {
		cfg += fmt.Sprintf("  - entrypoint: [okgoes-scorecard, %s]\n    image: %s\n    labels: {suite: okgoes, test: %s}\n", name, image, name)
	}
	return cfg
}

const standardScorecardStage = `apiVersion: scorecard.operatorframework.io/v1alpha3
kind: Configuration
metadata:
  name: config
stages:
- parallel: true
  tests:
  - entrypoint: [scorecard-test, basic-check-spec]
    image: quay.io/operator-framework/scorecard-test:v1.39.0
    labels: {suite: basic, test: basic-check-spec-test}
  - entrypoint: [scorecard-test, olm-bundle-validation]
    image: quay.io/operator-framework/scorecard-test:v1.39.0
    labels: {suite: olm, test: olm-bundle-validation-test}
  - entrypoint: [scorecard-test, olm-crds-have-validation]
    image: quay.io/operator-framework/scorecard-test:v1.39.0
    labels: {suite: olm, test: olm-crds-have-validation-test}
  - entrypoint: [scorecard-test, olm-crds-have-resources]
    image: quay.io/operator-framework/scorecard-test:v1.39.0
    labels: {suite: olm, test: olm-crds-have-resources-test}
  - entrypoint: [scorecard-test, olm-spec-descriptors]
    image: quay.io/operator-framework/scorecard-test:v1.39.0
    labels: {suite: olm, test: olm-spec-descriptors-test}
  - entrypoint: [scorecard-test, olm-status-descriptors]
    image: quay.io/operator-framework/scorecard-test:v1.39.0
    labels: {suite: olm, test: olm-status-descriptors-test}
`
