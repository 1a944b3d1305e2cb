package main

import (
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
)

// metadataFiles are the bundle's annotations, its scorecard configuration and bundle.Dockerfile,
// with the same labels operator-sdk writes, plus com.redhat.openshift.versions when the CSV has a
// minKubeVersion (community-operators-prod's static check requires it then).
func metadataFiles(o options, minKubeVersion string) ([]file, error) {
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
	if minKubeVersion != "" {
		v, err := openShiftVersions(minKubeVersion)
		if err != nil {
			return nil, err
		}
		labels = append(labels, [2]string{"com.redhat.openshift.versions", v})
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
	}, nil
}

// openShiftVersions is the com.redhat.openshift.versions of a minKubeVersion: "v4.N", the
// OpenShift release built on that Kubernetes minor and every later one (OpenShift 4.N ships
// Kubernetes 1.(N+13): 4.17 is 1.30).
func openShiftVersions(minKubeVersion string) (string, error) {
	v, err := semver.ParseTolerant(minKubeVersion)
	if err != nil {
		return "", fmt.Errorf("minKubeVersion %q: %w", minKubeVersion, err)
	}
	if v.Major != 1 || v.Minor < 25 {
		return "", fmt.Errorf("minKubeVersion %q: no OpenShift 4 release before Kubernetes 1.25 is supported", minKubeVersion)
	}
	return fmt.Sprintf("v4.%d", v.Minor-13), nil
}

// okgoesScorecardTests are the tests of this operator's own scorecard image (scorecard/, make
// scorecard-image); the scorecard module's tests check that the list and the binary agree.
var okgoesScorecardTests = []string{
	"alm-examples-have-spec", "crds-have-validation", "crds-have-resources",
	"descriptors-cover-samples", "samples-ready", "invalid-rejected",
}

// scorecardConfig runs the standard basic and OLM suites of operator-sdk's scorecard (the test
// image of the operator-sdk release bin/operator-sdk is built from), then the
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
    image: quay.io/operator-framework/scorecard-test:v1.42.3
    labels: {suite: basic, test: basic-check-spec-test}
  - entrypoint: [scorecard-test, olm-bundle-validation]
    image: quay.io/operator-framework/scorecard-test:v1.42.3
    labels: {suite: olm, test: olm-bundle-validation-test}
  - entrypoint: [scorecard-test, olm-crds-have-validation]
    image: quay.io/operator-framework/scorecard-test:v1.42.3
    labels: {suite: olm, test: olm-crds-have-validation-test}
  - entrypoint: [scorecard-test, olm-crds-have-resources]
    image: quay.io/operator-framework/scorecard-test:v1.42.3
    labels: {suite: olm, test: olm-crds-have-resources-test}
  - entrypoint: [scorecard-test, olm-spec-descriptors]
    image: quay.io/operator-framework/scorecard-test:v1.42.3
    labels: {suite: olm, test: olm-spec-descriptors-test}
  - entrypoint: [scorecard-test, olm-status-descriptors]
    image: quay.io/operator-framework/scorecard-test:v1.42.3
    labels: {suite: olm, test: olm-status-descriptors-test}
`
