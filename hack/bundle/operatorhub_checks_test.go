package main

// A port of the static checks that operator-pipelines runs on a pull request to
// community-operators (OperatorHub.io) and community-operators-prod (OpenShift), from
// github.com/redhat-openshift-ecosystem/operator-pipelines at 422dfd6e (operatorcert/static_tests/,
// operatorcert/operator_repo/core.py). Each check names the Python function it ports; the schemas
// in testdata/operator-pipelines are upstream's files, unchanged (Apache-2.0).
//
// Differences from upstream, all where upstream needs the network:
//   - check_osdk_bundle_validate_*: upstream runs the operator-sdk CLI; here the same validators of
//     operator-framework/api run as a library (make bundle-validate and the OLM suite run the CLI).
//     The Kubernetes version of the deprecated-API check is the one upstream's ocp_to_k8s_ver gives
//     the newest OpenShift release it knows (4.17: 1.30).
//   - check_replaces_availability: upstream asks Pyxis which OpenShift indexes a
//     com.redhat.openshift.versions selects; here the selection is made over the OCP_TO_K8S table,
//     as check_api_version_constraints does.
//   - The checks decorated @skip_fbc run even though ci.yaml enables FBC (where upstream skips
//     them), so the submission passes whichever mode the reviewers ask for; check_using_fbc, whose
//     only purpose is to warn non-FBC operators, follows the decorator.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	interfaces "github.com/operator-framework/api/pkg/validation/interfaces"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
	"sigs.k8s.io/yaml"
)

// checkResult is one Fail or Warn of a check.
type checkResult struct {
	check string
	fail  bool // Fail; else Warn
	msg   string
}

func (r checkResult) String() string {
	level := "Warn"
	if r.fail {
		level = "Fail"
	}
	return fmt.Sprintf("%s %s: %s", level, r.check, r.msg)
}

// hubOperator is operators/<name>/ of a community repository: operatorcert's Operator.
type hubOperator struct {
	dir     string
	name    string         // the directory name
	config  map[string]any // ci.yaml
	bundles []*hubBundle   // in semver order (Bundle.__lt__)
}

// hubBundle is operators/<name>/<version>/: operatorcert's Bundle.
type hubBundle struct {
	dir           string
	dirVersion    string         // the directory name (Bundle.operator_version)
	csv           map[string]any // the CSV as YAML parses it
	annotations   map[string]string
	releaseConfig map[string]any // release-config.yaml, nil when absent
}

// csvNameParts is Bundle.csv_full_name: metadata.name split at its first dot, "v" stripped.
func (b *hubBundle) csvNameParts() (name, version string) {
	full, _ := lookup(b.csv, "metadata.name").(string)
	name, version, _ = strings.Cut(full, ".")
	return name, strings.TrimPrefix(version, "v")
}

// channels is Bundle.channels.
func (b *hubBundle) channels() map[string]bool {
	out := map[string]bool{}
	if v, ok := b.annotations["operators.operatorframework.io.bundle.channels.v1"]; ok {
		for _, c := range strings.Split(v, ",") {
			out[strings.TrimSpace(c)] = true
		}
	}
	return out
}

func loadHubOperator(dir string) (*hubOperator, error) {
	op := &hubOperator{dir: dir, name: filepath.Base(dir)}
	if err := readYAML(filepath.Join(dir, "ci.yaml"), &op.config); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		bdir := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(bdir, "manifests")); err != nil {
			continue // Bundle.probe: a bundle has manifests/ and metadata/
		}
		b := &hubBundle{dir: bdir, dirVersion: e.Name()}
		csvs, _ := filepath.Glob(filepath.Join(bdir, "manifests", "*.clusterserviceversion.yaml"))
		if len(csvs) != 1 {
			return nil, fmt.Errorf("%s: want one CSV, have %d", bdir, len(csvs))
		}
		if err := readYAML(csvs[0], &b.csv); err != nil {
			return nil, err
		}
		var ann struct {
			Annotations map[string]string `json:"annotations"`
		}
		if err := readYAML(filepath.Join(bdir, "metadata", "annotations.yaml"), &ann); err != nil {
			return nil, err
		}
		b.annotations = ann.Annotations
		if _, err := os.Stat(filepath.Join(bdir, "release-config.yaml")); err == nil {
			if err := readYAML(filepath.Join(bdir, "release-config.yaml"), &b.releaseConfig); err != nil {
				return nil, err
			}
		}
		op.bundles = append(op.bundles, b)
	}
	sort.Slice(op.bundles, func(i, j int) bool {
		_, vi := op.bundles[i].csvNameParts()
		_, vj := op.bundles[j].csvNameParts()
		a, errA := semver.Parse(vi)
		b, errB := semver.Parse(vj)
		if errA != nil || errB != nil {
			return vi < vj
		}
		return a.LT(b)
	})
	return op, nil
}

func readYAML(path string, into any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return yaml.Unmarshal(data, into)
}

// lookup is operator_repo.utils.lookup_dict: a dotted path into nested maps, nil when absent.
func lookup(m map[string]any, path string) any {
	var cur any = m
	for _, k := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

func (op *hubOperator) fbcEnabled() bool {
	enabled, _ := lookup(op.config, "fbc.enabled").(bool)
	return enabled
}

// runStaticChecks runs every operator check once and every bundle check on every bundle, as the
// community suite does for the bundles of a pull request.
func runStaticChecks(op *hubOperator) []checkResult {
	var out []checkResult
	add := func(name string, rs []checkResult) {
		for _, r := range rs {
			r.check = name
			out = append(out, r)
		}
	}
	add("check_schema_operator_ci_config", checkSchemaOperatorCIConfig(op))
	add("check_catalog_usage_ci_config", checkCatalogUsageCIConfig(op))
	add("check_operator_name_unique", checkOperatorNameUnique(op))
	add("check_ci_upgrade_graph", checkCIUpgradeGraph(op))
	add("check_upgrade_graph_loop", checkUpgradeGraphLoop(op))
	for _, b := range op.bundles {
		add("check_operator_name", checkOperatorName(op, b))
		add("check_bundle_release_config", checkBundleReleaseConfig(op, b))
		add("check_validate_schema_bundle_release_config", checkValidateSchemaBundleReleaseConfig(b))
		add("check_network_policy_presence", checkNetworkPolicyPresence(b))
		add("check_operator_version_directory_name", checkOperatorVersionDirectoryName(b))
		add("check_replaces_availability", checkReplacesAvailability(op, b))
		add("check_osdk_bundle_validate", checkOSDKBundleValidate(b))
		add("check_required_fields", checkRequiredFields(b))
		add("check_dangling_bundles", checkDanglingBundles(op, b))
		add("check_api_version_constraints", checkAPIVersionConstraints(b))
		if !op.fbcEnabled() {
			add("check_using_fbc", checkUsingFBC(op))
		}
	}
	return out
}

func fail(format string, a ...any) checkResult {
	return checkResult{fail: true, msg: fmt.Sprintf(format, a...)}
}
func warn(format string, a ...any) checkResult { return checkResult{msg: fmt.Sprintf(format, a...)} }

// validateSchema validates doc against one of upstream's JSON schemas (testdata/operator-pipelines).
// Their keywords (type, enum, properties, additionalProperties, items, required, minItems,
// uniqueItems) mean the same in kube-openapi's validator as in Draft 2020-12.
func validateSchema(schemaFile string, doc map[string]any, what string) []checkResult {
	data, err := os.ReadFile(filepath.Join("testdata", "operator-pipelines", schemaFile))
	if err != nil {
		return []checkResult{fail("%v", err)}
	}
	var s spec.Schema
	if err := json.Unmarshal(data, &s); err != nil {
		return []checkResult{fail("%s: %v", schemaFile, err)}
	}
	// Through JSON, so that numbers and maps have the types the validator expects.
	raw, err := json.Marshal(doc)
	if err != nil {
		return []checkResult{fail("%v", err)}
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return []checkResult{fail("%v", err)}
	}
	var out []checkResult
	for _, e := range validate.NewSchemaValidator(&s, nil, "", strfmt.Default).Validate(v).Errors {
		out = append(out, fail("%s contains invalid data which does not comply with the schema: %v", what, e))
	}
	return out
}

// checkSchemaOperatorCIConfig ports common/operator.py check_schema_operator_ci_config.
func checkSchemaOperatorCIConfig(op *hubOperator) []checkResult {
	return validateSchema("ci-schema.json", op.config, "Operator's 'ci.yaml'")
}

// checkCatalogUsageCIConfig ports common/operator.py check_catalog_usage_ci_config: no catalog
// mapped to two templates.
func checkCatalogUsageCIConfig(op *hubOperator) []checkResult {
	mapping, _ := lookup(op.config, "fbc.catalog_mapping").([]any)
	templates := map[string][]string{}
	var catalogs []string
	for _, m := range mapping {
		mm, _ := m.(map[string]any)
		name, _ := mm["template_name"].(string)
		names, _ := mm["catalog_names"].([]any)
		for _, c := range names {
			cs := fmt.Sprint(c)
			if templates[cs] == nil {
				catalogs = append(catalogs, cs)
			}
			templates[cs] = append(templates[cs], name)
		}
	}
	var out []checkResult
	for _, c := range catalogs {
		if len(templates[c]) > 1 {
			out = append(out, fail("Operator's 'ci.yaml' contains multiple templates '%v' for the same catalog '%s'.", templates[c], c))
		}
	}
	return out
}

// checkOperatorNameUnique ports community/operator.py check_operator_name_unique.
func checkOperatorNameUnique(op *hubOperator) []checkResult {
	names := map[string]bool{}
	for _, b := range op.bundles {
		n, _ := b.csvNameParts()
		names[n] = true
	}
	if len(names) > 1 {
		return []checkResult{fail("Bundles use multiple operator names: %v", names)}
	}
	return nil
}

// checkCIUpgradeGraph ports community/operator.py check_ci_upgrade_graph.
func checkCIUpgradeGraph(op *hubOperator) []checkResult {
	g, ok := op.config["updateGraph"]
	if !ok || g == "" {
		return []checkResult{warn("The 'updateGraph' option is missing in ci.yaml. The default upgrade graph 'replaces-mode' will be used.")}
	}
	if g != "replaces-mode" && g != "semver-mode" {
		return []checkResult{fail("The 'updateGraph' option in ci.yaml must be one of [replaces-mode semver-mode]")}
	}
	return nil
}

// channelBundles ports Operator.channel_bundles: the bundles of a channel in semver order.
func (op *hubOperator) channelBundles(channel string) []*hubBundle {
	var out []*hubBundle
	for _, b := range op.bundles {
		if b.channels()[channel] {
			out = append(out, b)
		}
	}
	return out
}

// updateGraph ports Operator.update_graph (_replaces_graph, _resolve_skip_range): each bundle
// mapped to the bundles that can replace it.
func (op *hubOperator) updateGraph(channel string) (map[*hubBundle]map[*hubBundle]bool, error) {
	all := op.channelBundles(channel)
	edges := map[*hubBundle]map[*hubBundle]bool{}
	addEdge := func(from, to *hubBundle) {
		if edges[from] == nil {
			edges[from] = map[*hubBundle]bool{}
		}
		edges[from][to] = true
	}
	switch mode, _ := op.config["updateGraph"].(string); mode {
	case "semver-mode":
		for i := 1; i < len(all); i++ {
			addEdge(all[i-1], all[i])
		}
		return edges, nil
	case "", "replaces-mode":
	default:
		return nil, fmt.Errorf("%s: unsupported updateGraph value: %s", op.name, mode)
	}
	byVersion := map[string]*hubBundle{}
	for _, b := range all {
		_, v := b.csvNameParts()
		byVersion[v] = b
	}
	for _, b := range all {
		annotations, _ := lookup(b.csv, "metadata.annotations").(map[string]any)
		skipRange, _ := annotations["olm.skipRange"].(string)
		if skipRange == "" {
			continue
		}
		r, err := semver.ParseRange(skipRange)
		if err != nil {
			continue // upstream logs "Invalid skipRange" and ignores it
		}
		for v, replaced := range byVersion {
			if sv, err := semver.Parse(v); err == nil && r(sv) {
				addEdge(replaced, b)
			}
		}
	}
	for _, b := range all {
		var previous []string
		if r, ok := lookup(b.csv, "spec.replaces").(string); ok {
			previous = append(previous, r)
		}
		skips, _ := lookup(b.csv, "spec.skips").([]any)
		for _, s := range skips {
			previous = append(previous, fmt.Sprint(s))
		}
		for _, name := range previous {
			_, v, ok := strings.Cut(name, ".")
			if !ok {
				return nil, fmt.Errorf("%s has invalid 'replaces' field: '%s'", b.dirVersion, name)
			}
			if replaced := byVersion[strings.TrimPrefix(v, "v")]; replaced != nil {
				addEdge(replaced, b)
			}
		}
	}
	return edges, nil
}

// allChannels is every channel of every bundle plus each default channel.
func (op *hubOperator) allChannels() []string {
	set := map[string]bool{}
	for _, b := range op.bundles {
		for c := range b.channels() {
			set[c] = true
		}
		if d, ok := b.annotations["operators.operatorframework.io.bundle.channel.default.v1"]; ok {
			set[strings.TrimSpace(d)] = true
		}
	}
	var out []string
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// checkUpgradeGraphLoop ports community/operator.py check_upgrade_graph_loop and has_cycle.
func checkUpgradeGraphLoop(op *hubOperator) []checkResult {
	var out []checkResult
	for _, channel := range op.allChannels() {
		graph, err := op.updateGraph(channel)
		if err != nil {
			return append(out, fail("%v", err))
		}
		visited, stack := map[*hubBundle]bool{}, map[*hubBundle]bool{}
		var dfs func(n *hubBundle) (from, to *hubBundle)
		dfs = func(n *hubBundle) (*hubBundle, *hubBundle) {
			visited[n], stack[n] = true, true
			for next := range graph[n] {
				if !visited[next] {
					if f, t := dfs(next); f != nil {
						return f, t
					}
				} else if stack[next] {
					return n, next
				}
			}
			delete(stack, n)
			return nil, nil
		}
		for _, n := range op.bundles {
			if _, ok := graph[n]; ok && !visited[n] {
				if f, t := dfs(n); f != nil {
					out = append(out, fail("Upgrade graph loop detected: %s -> %s", f.dirVersion, t.dirVersion))
					break
				}
			}
		}
	}
	return out
}

// checkOperatorName ports common/bundle.py check_operator_name (with _check_consistency).
func checkOperatorName(op *hubOperator, b *hubBundle) []checkResult {
	meta := b.annotations["operators.operatorframework.io.bundle.package.v1"]
	if meta == "" {
		return []checkResult{fail("Bundle does not define the operator name in annotations.yaml")}
	}
	csvName, _ := b.csvNameParts()
	others := 0
	var out []checkResult
	otherMeta, otherCSV := map[string]bool{}, map[string]bool{}
	for _, o := range op.bundles {
		if o == b {
			continue
		}
		others++
		otherMeta[o.annotations["operators.operatorframework.io.bundle.package.v1"]] = true
		n, _ := o.csvNameParts()
		otherCSV[n] = true
	}
	consistency := func(mine string, other map[string]bool, what string) {
		if len(other) == 1 {
			for common := range other {
				if common != mine {
					out = append(out, fail("Operator name %s (%s) does not match the name defined in other bundles (%s)", what, mine, common))
				}
			}
		} else {
			out = append(out, warn("Operator name %s is not consistent across bundles", what))
		}
	}
	if others > 0 {
		consistency(meta, otherMeta, "from annotations.yaml")
		consistency(csvName, otherCSV, "from the CSV")
	}
	failOrWarn := func(msg string) {
		if others > 0 {
			out = append(out, warn("%s", msg))
		} else {
			out = append(out, fail("%s", msg))
		}
	}
	if meta != csvName {
		failOrWarn(fmt.Sprintf("Operator name from annotations.yaml (%s) does not match the name defined in the CSV (%s)", meta, csvName))
	}
	if meta != op.name {
		failOrWarn(fmt.Sprintf("Operator name from annotations.yaml (%s) does not match the operator's directory name (%s)", meta, op.name))
	}
	return out
}

// checkBundleReleaseConfig ports common/bundle.py check_bundle_release_config (and
// _check_semver_allowed_channels).
func checkBundleReleaseConfig(op *hubOperator, b *hubBundle) []checkResult {
	if b.releaseConfig == nil {
		return nil
	}
	if !op.fbcEnabled() {
		return []checkResult{fail("Bundle's 'release-config.yaml' is used but FBC is not enabled for the operator.")}
	}
	mapping, _ := lookup(op.config, "fbc.catalog_mapping").([]any)
	byName := map[string]map[string]any{}
	for _, m := range mapping {
		mm, _ := m.(map[string]any)
		name, _ := mm["template_name"].(string)
		byName[name] = mm
	}
	var out []checkResult
	templates, _ := b.releaseConfig["catalog_templates"].([]any)
	for _, t := range templates {
		tm, _ := t.(map[string]any)
		name, _ := tm["template_name"].(string)
		m, ok := byName[name]
		if !ok {
			out = append(out, fail("Bundle's 'release-config.yaml' contains a catalog template '%s' that is not defined in the ci.yaml file under 'catalog_mapping'.", name))
			continue
		}
		if m["type"] != "olm.semver" {
			continue
		}
		channels, _ := tm["channels"].([]any)
		for _, c := range channels {
			if c != "Fast" && c != "Candidate" && c != "Stable" {
				out = append(out, fail("Bundle's 'release-config.yaml' contains a semver catalog template '%s' with invalid channels: %v", name, channels))
				break
			}
		}
	}
	return out
}

// checkValidateSchemaBundleReleaseConfig ports common/bundle.py
// check_validate_schema_bundle_release_config.
func checkValidateSchemaBundleReleaseConfig(b *hubBundle) []checkResult {
	if b.releaseConfig == nil {
		return nil
	}
	return validateSchema("release-config-schema.json", b.releaseConfig, "Bundle's 'release-config.yaml'")
}

// checkNetworkPolicyPresence ports common/bundle.py check_network_policy_presence.
func checkNetworkPolicyPresence(b *hubBundle) []checkResult {
	files, _ := filepath.Glob(filepath.Join(b.dir, "manifests", "*"))
	var out []checkResult
	for _, f := range files {
		var obj map[string]any
		if readYAML(f, &obj) != nil {
			continue
		}
		if api, _ := obj["apiVersion"].(string); obj["kind"] == "NetworkPolicy" && strings.HasPrefix(api, "networking.k8s.io/") {
			out = append(out, fail("Bundle contains a NetworkPolicy in %s.", filepath.Base(f)))
		}
	}
	return out
}

// checkOperatorVersionDirectoryName ports common/bundle.py check_operator_version_directory_name.
func checkOperatorVersionDirectoryName(b *hubBundle) []checkResult {
	if _, v := b.csvNameParts(); v != b.dirVersion {
		return []checkResult{fail("Bundle directory name '%s' does not match the expected operator CSV version '%s'", b.dirVersion, v)}
	}
	return nil
}

// checkReplacesAvailability ports common/bundle.py check_replaces_availability: the replaced
// version is in the repository and supports every OpenShift version this bundle does.
func checkReplacesAvailability(op *hubOperator, b *hubBundle) []checkResult {
	replaces, _ := lookup(b.csv, "spec.replaces").(string)
	if replaces == "" {
		return nil
	}
	delim := "."
	if strings.Contains(replaces, ".v") {
		delim = ".v"
	}
	_, replacesVersion, _ := strings.Cut(replaces, delim)
	_, mine := b.csvNameParts()
	if replacesVersion == mine {
		return []checkResult{fail("%s attempts to replace itself.", b.dirVersion)}
	}
	var available []string
	var replaced *hubBundle
	for _, o := range op.bundles {
		_, v := o.csvNameParts()
		available = append(available, v)
		if v == replacesVersion {
			replaced = o
		}
	}
	if replaced == nil {
		sort.Strings(available)
		return []checkResult{fail("%s attempts to replace version '%s' which does not exist in the submitted PR branch. Available versions: %v.", b.dirVersion, replacesVersion, available)}
	}
	mineOCP := b.annotations["com.redhat.openshift.versions"]
	theirOCP := replaced.annotations["com.redhat.openshift.versions"]
	if mineOCP == theirOCP {
		return nil
	}
	indexes, err1 := selectOCPVersions(mineOCP)
	replacedIndexes, err2 := selectOCPVersions(theirOCP)
	if err1 != nil || err2 != nil {
		return []checkResult{fail("invalid com.redhat.openshift.versions: %v %v", err1, err2)}
	}
	for v := range indexes {
		if !replacedIndexes[v] {
			return []checkResult{fail("Replaces bundle %s does not support the same OCP versions as bundle %s: `%s` - `%s`", replaced.dirVersion, b.dirVersion, theirOCP, mineOCP)}
		}
	}
	return nil
}

// ocpToK8s is community/bundle.py OCP_TO_K8S.
var ocpToK8s = map[string]string{
	"4.1": "1.13", "4.2": "1.14", "4.3": "1.16", "4.4": "1.17", "4.5": "1.18", "4.6": "1.19",
	"4.7": "1.20", "4.8": "1.21", "4.9": "1.22", "4.10": "1.23", "4.11": "1.24", "4.12": "1.25",
	"4.13": "1.26", "4.14": "1.27", "4.15": "1.28", "4.16": "1.29", "4.17": "1.30",
}

// parseLooseSemver is _parse_semver: major[.minor[.patch]], prerelease and build dropped.
func parseLooseSemver(s string) (semver.Version, error) {
	v, err := semver.ParseTolerant(strings.TrimSpace(s))
	if err != nil {
		return v, err
	}
	v.Pre, v.Build = nil, nil
	return v, nil
}

// parseOCP is _parse_ocp_version.
func parseOCP(s string) (semver.Version, error) {
	v, err := parseLooseSemver(strings.TrimPrefix(strings.TrimSpace(s), "v"))
	v.Patch = 0
	return v, err
}

func knownOCP() []semver.Version {
	var out []semver.Version
	for o := range ocpToK8s {
		v, _ := parseOCP(o)
		out = append(out, v)
	}
	semver.Sort(out)
	return out
}

// selectOCPVersions is the selection of check_api_version_constraints: a range "v4.10-v4.12", a
// comma list (its minimum and later), "=v4.N" (the closest known version at or below), or "v4.N"
// (that and later), among the known OpenShift versions. An empty selector selects none.
func selectOCPVersions(selector string) (map[string]bool, error) {
	selector = strings.TrimSpace(selector)
	out := map[string]bool{}
	if selector == "" {
		return out, nil
	}
	in := func(pred func(semver.Version) bool) {
		for _, v := range knownOCP() {
			if pred(v) {
				out[fmt.Sprintf("%d.%d", v.Major, v.Minor)] = true
			}
		}
	}
	switch {
	case strings.Contains(selector, "-"):
		a, b, _ := strings.Cut(selector, "-")
		va, err := parseOCP(a)
		if err != nil {
			return nil, err
		}
		vb, err := parseOCP(b)
		if err != nil {
			return nil, err
		}
		in(func(v semver.Version) bool { return va.LTE(v) && v.LTE(vb) })
	case strings.Contains(selector, ","):
		var lowest *semver.Version
		for _, s := range strings.Split(selector, ",") {
			v, err := parseOCP(s)
			if err != nil {
				return nil, err
			}
			if lowest == nil || v.LT(*lowest) {
				lowest = &v
			}
		}
		in(func(v semver.Version) bool { return v.GTE(*lowest) })
	case strings.HasPrefix(selector, "="):
		want, err := parseOCP(strings.TrimPrefix(selector, "="))
		if err != nil {
			return nil, err
		}
		// find_closest_ocp_version: the highest known version <= want, else the lowest.
		known := knownOCP()
		closest := known[0]
		for _, v := range known {
			if v.LTE(want) {
				closest = v
			}
		}
		in(func(v semver.Version) bool { return v.EQ(closest) })
	default:
		min, err := parseOCP(selector)
		if err != nil {
			return nil, err
		}
		in(func(v semver.Version) bool { return v.GTE(min) })
	}
	return out, nil
}

// checkAPIVersionConstraints ports community/bundle.py check_api_version_constraints: with a
// minKubeVersion, com.redhat.openshift.versions must be set and select no OpenShift release
// older than that Kubernetes version.
func checkAPIVersionConstraints(b *hubBundle) []checkResult {
	minStr, _ := lookup(b.csv, "spec.minKubeVersion").(string)
	if minStr == "" {
		return nil
	}
	min, err := parseLooseSemver(minStr)
	if err != nil {
		return []checkResult{fail("Invalid minKubeVersion: %v", err)}
	}
	selector := b.annotations["com.redhat.openshift.versions"]
	if selector == "" {
		return []checkResult{fail("minKubeVersion is set to %s but com.redhat.openshift.versions is not set", min)}
	}
	selected, err := selectOCPVersions(selector)
	if err != nil {
		return []checkResult{fail("Invalid com.redhat.openshift.versions: %v", err)}
	}
	var out []checkResult
	if !strings.Contains(selector, "-") && strings.Contains(selector, ",") && !isV45V46(selector) {
		out = append(out, warn("Comma separated list of versions in com.redhat.openshift.versions is only supported for v4.5 and v4.6"))
	}
	var conflicting []string
	for o := range selected {
		k, _ := parseLooseSemver(ocpToK8s[o])
		if k.LT(min) {
			conflicting = append(conflicting, o)
		}
	}
	if len(conflicting) > 0 {
		sort.Strings(conflicting)
		out = append(out, fail("OCP version(s) %s conflict with minKubeVersion=%s", strings.Join(conflicting, ","), min))
	}
	return out
}

// isV45V46 tells whether a comma list selects exactly v4.5 and v4.6.
func isV45V46(selector string) bool {
	set := map[string]bool{}
	for _, s := range strings.Split(selector, ",") {
		v, err := parseOCP(s)
		if err != nil {
			return false
		}
		set[fmt.Sprintf("%d.%d", v.Major, v.Minor)] = true
	}
	return len(set) == 2 && set["4.5"] && set["4.6"]
}

// checkDanglingBundles ports community/bundle.py check_dangling_bundles: every bundle of a channel
// is replaced by another one or is the channel head.
func checkDanglingBundles(op *hubOperator, b *hubBundle) []checkResult {
	channels := b.channels()
	if d, ok := b.annotations["operators.operatorframework.io.bundle.channel.default.v1"]; ok {
		channels[strings.TrimSpace(d)] = true
	}
	names := make([]string, 0, len(channels))
	for c := range channels {
		names = append(names, c)
	}
	sort.Strings(names)
	var out []checkResult
	for _, channel := range names {
		bundles := op.channelBundles(channel)
		graph, err := op.updateGraph(channel)
		if err != nil {
			return append(out, fail("%v", err))
		}
		var dangling []string
		for i, x := range bundles {
			if _, ok := graph[x]; !ok && i != len(bundles)-1 {
				dangling = append(dangling, x.dirVersion)
			}
		}
		if len(dangling) > 0 {
			out = append(out, fail("Channel %s has dangling bundles: %v", channel, dangling))
		}
	}
	return out
}

// checkUsingFBC ports community/bundle.py check_using_fbc (non-FBC operators only).
func checkUsingFBC(op *hubOperator) []checkResult {
	if len(op.bundles) > 1 {
		return []checkResult{warn("This operator does not use FBC. Consider migrating for better maintainability.")}
	}
	return []checkResult{warn("This operator does not use FBC and it is recommended for new operators to start directly with FBC.")}
}

// ocpLatestK8s is ocp_to_k8s_ver of the newest OpenShift release: an unknown newer release maps to
// the closest known one (4.17, Kubernetes 1.30).
const ocpLatestK8s = "1.30"

// checkOSDKBundleValidate ports community/bundle.py check_osdk_bundle_validate_operatorhub and
// check_osdk_bundle_validate_operator_framework: operator-sdk bundle validate with
// --select-optional name=operatorhub and suite=operatorframework, each after the default
// validators, --optional-values=k8s-version=<newest OpenShift's>; errors Fail, anything else Warns.
func checkOSDKBundleValidate(b *hubBundle) []checkResult {
	bundle, err := manifests.GetBundleFromDir(b.dir)
	if err != nil {
		return []checkResult{fail("operator-sdk returned non-JSON output when validating bundle: %v", err)}
	}
	objs := append(bundle.ObjectsToValidate(), map[string]string{"k8s-version": ocpLatestK8s})
	var out []checkResult
	for _, suite := range []interfaces.Validators{
		append(append(interfaces.Validators{}, validation.DefaultBundleValidators...), validation.OperatorHubValidator),
		append(append(interfaces.Validators{}, validation.DefaultBundleValidators...), validation.OperatorHubV2Validator,
			validation.StandardCapabilitiesValidator, validation.StandardCategoriesValidator,
			validation.AlphaDeprecatedAPIsValidator, validation.GoodPracticesValidator),
	} {
		for _, r := range suite.Validate(objs...) {
			for _, e := range r.Errors {
				out = append(out, fail("%s", e.Error()))
			}
			for _, w := range r.Warnings {
				out = append(out, warn("%s", w.Error()))
			}
		}
	}
	return out
}

// requiredField is one row of check_required_fields: the field, its validation, and whether a
// bad value fails (else warns).
type requiredField struct {
	path  string
	valid func(any) bool
	fatal bool
}

// matches is Python's re.match: anchored at the start only.
func matches(expr string) func(any) bool {
	re := regexp.MustCompile(`^(?:` + expr + `)`)
	return func(v any) bool { return re.MatchString(fmt.Sprint(v)) }
}

var capabilityLevels = []string{"Basic Install", "Seamless Upgrades", "Full Lifecycle", "Deep Insights", "Auto Pilot"}

var hubCategories = []string{"AI/Machine Learning", "Application Runtime", "Big Data", "Cloud Provider",
	"Developer Tools", "Database", "Drivers and plugins", "Integration & Delivery", "Logging & Tracing",
	"Modernization & Migration", "Monitoring", "Networking", "OpenShift Optional", "Security", "Storage",
	"Streaming & Messaging"}

// listOfDicts is validations.py validate_list_of_dicts: a list of maps with these string keys.
func listOfDicts(v any, keys ...string) ([]map[string]any, bool) {
	list, ok := v.([]any)
	if !ok {
		return nil, false
	}
	var out []map[string]any
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, false
		}
		for _, k := range keys {
			if _, ok := m[k].(string); !ok {
				return nil, false
			}
		}
		out = append(out, m)
	}
	return out, true
}

// requiredFields is community/bundle.py check_required_fields' table with validations.py's
// validators.
var requiredFields = []requiredField{
	{"metadata.annotations.capabilities", func(v any) bool {
		s, ok := v.(string)
		return ok && contains(capabilityLevels, s)
	}, false},
	{"metadata.annotations.categories", func(v any) bool {
		for _, c := range strings.Split(fmt.Sprint(v), ",") {
			if !contains(hubCategories, strings.TrimSpace(c)) {
				return false
			}
		}
		return true
	}, false},
	{"metadata.annotations.containerImage", matches(`([^/]+/){1,}[^/:]+:.+`), false},
	{"metadata.annotations.createdAt", func(v any) bool { // validate_timestamp: isoparse
		_, err := time.Parse(time.RFC3339, fmt.Sprint(v))
		return err == nil
	}, false},
	{"metadata.annotations.repository", matches(`https?://.+`), false},
	{"metadata.annotations.support", matches(`(?s).{3,}`), false},
	{"metadata.annotations.description", matches(`(?s).{10,}`), false},
	{"spec.displayName", matches(`.{3,50}`), true},
	{"spec.description", matches(`(?s).{20,}`), true},
	{"spec.icon", func(v any) bool { // validate_icon
		icons, ok := listOfDicts(v, "base64data", "mediatype")
		if !ok || len(icons) == 0 {
			return false
		}
		for _, icon := range icons {
			data := strings.Join(strings.Fields(icon["base64data"].(string)), "")
			if _, err := base64.StdEncoding.DecodeString(data); len(data) < 4 || err != nil {
				return false
			}
			if !contains([]string{"image/png", "image/jpeg", "image/gif", "image/svg+xml"}, icon["mediatype"].(string)) {
				return false
			}
		}
		return true
	}, true},
	{"spec.version", func(v any) bool {
		_, err := semver.Parse(fmt.Sprint(v))
		return err == nil
	}, true},
	{"spec.maintainers", func(v any) bool {
		m, ok := listOfDicts(v, "name", "email")
		return ok && len(m) > 0
	}, true},
	{"spec.provider.name", matches(`.{3,}`), true},
	{"spec.links", func(v any) bool {
		l, ok := listOfDicts(v, "name", "url")
		return ok && len(l) > 0
	}, true},
	{"spec.keywords", func(v any) bool { // validate_list_of_strings
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return false
		}
		for _, x := range list {
			if _, ok := x.(string); !ok {
				return false
			}
		}
		return true
	}, false},
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkRequiredFields ports community/bundle.py check_required_fields.
func checkRequiredFields(b *hubBundle) []checkResult {
	var out []checkResult
	for _, f := range requiredFields {
		v := lookup(b.csv, f.path)
		var msg string
		switch {
		case v == nil:
			msg = "CSV does not define " + f.path
		case !f.valid(v):
			msg = "CSV contains an invalid value for " + f.path
		default:
			continue
		}
		if f.fatal {
			out = append(out, fail("%s", msg))
		} else {
			out = append(out, warn("%s", msg))
		}
	}
	return out
}
