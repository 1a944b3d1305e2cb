package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const packageName = "okgoes-operator"

type options struct {
	root, version, image, replaces, skipRange, createdAt, channels, defaultChannel string
	// digests is releases/digests.yaml (relative to root); managerDigest a
	// <repository>@sha256:<hex> reference. Either pins the operator image by digest (digests.go).
	digests, managerDigest string
}

// file is one output file, relative to the repository root.
type file struct {
	path string
	data []byte
}

// write generates the bundle files and writes them, replacing bundle/ entirely.
func write(o options) error {
	files, err := generate(o)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(o.root, "bundle")); err != nil {
		return err
	}
	for _, f := range files {
		p := filepath.Join(o.root, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// generate returns the bundle files for o.
func generate(o options) ([]file, error) {
	if o.version == "" || o.image == "" || o.createdAt == "" {
		return nil, fmt.Errorf("--version, --image and --created-at are required")
	}
	objs, err := kustomize(filepath.Join(o.root, "config", "manifests"))
	if err != nil {
		return nil, err
	}
	var csv *operatorsv1alpha1.ClusterServiceVersion
	var crds []*apiextensionsv1.CustomResourceDefinition
	var deployments []*appsv1.Deployment
	roles := map[string][]rbacv1.PolicyRule{} // kind/name -> rules
	var bindings []unstructured.Unstructured
	var others []*unstructured.Unstructured
	for _, u := range objs {
		switch u.GetKind() {
		case "ClusterServiceVersion":
			csv = &operatorsv1alpha1.ClusterServiceVersion{}
			err = convert(u, csv)
		case "CustomResourceDefinition":
			crd := &apiextensionsv1.CustomResourceDefinition{}
			err = convert(u, crd)
			crds = append(crds, crd)
		case "Deployment":
			d := &appsv1.Deployment{}
			err = convert(u, d)
			deployments = append(deployments, d)
		case "ClusterRole", "Role":
			r := &rbacv1.ClusterRole{}
			err = convert(u, r)
			roles[u.GetKind()+"/"+u.GetName()] = r.Rules
			others = append(others, u)
		case "ClusterRoleBinding", "RoleBinding":
			bindings = append(bindings, *u)
		case "Namespace", "ServiceAccount":
			// OLM installs into the namespace the user picks and creates the ServiceAccounts
			// named by the install strategy.
		default:
			others = append(others, u)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	if csv == nil || len(deployments) != 1 {
		return nil, fmt.Errorf("config/manifests must hold one CSV base and one Deployment")
	}

	// Install strategy: the Deployment, and the rules of the roles bound to its ServiceAccount.
	dep := deployments[0]
	operatorImage, err := pinnedOperatorImage(o)
	if err != nil {
		return nil, err
	}
	if err := setOperatorImage(dep, operatorImage); err != nil {
		return nil, err
	}
	sa := dep.Spec.Template.Spec.ServiceAccountName
	strategy := operatorsv1alpha1.StrategyDetailsDeployment{
		DeploymentSpecs: []operatorsv1alpha1.StrategyDeploymentSpec{{Name: dep.Name, Spec: dep.Spec, Label: dep.Labels}},
	}
	bound := map[string]bool{}
	for _, b := range bindings {
		rb := &rbacv1.RoleBinding{}
		if err := convert(&b, rb); err != nil {
			return nil, err
		}
		key := rb.RoleRef.Kind + "/" + rb.RoleRef.Name
		for _, s := range rb.Subjects {
			if s.Kind != "ServiceAccount" || s.Name != sa {
				continue
			}
			perm := operatorsv1alpha1.StrategyDeploymentPermissions{ServiceAccountName: sa, Rules: roles[key]}
			if b.GetKind() == "ClusterRoleBinding" {
				strategy.ClusterPermissions = append(strategy.ClusterPermissions, perm)
			} else {
				strategy.Permissions = append(strategy.Permissions, perm)
			}
			bound[key] = true
		}
	}
	csv.Spec.InstallStrategy = operatorsv1alpha1.NamedInstallStrategy{StrategyName: "deployment", StrategySpec: strategy}

	name := packageName + ".v" + o.version
	csv.Name, csv.Namespace = name, "placeholder"
	csv.Spec.Version.Version, err = parseVersion(o.version)
	if err != nil {
		return nil, err
	}
	csv.Spec.Replaces = o.replaces
	csv.Annotations["containerImage"] = operatorImage
	csv.Annotations["createdAt"] = o.createdAt
	csv.Annotations["operators.operatorframework.io/builder"] = "okgoes-bundle-generator"
	csv.Annotations["operators.operatorframework.io/project_layout"] = "go.kubebuilder.io/v4"
	if o.skipRange != "" {
		csv.Annotations["olm.skipRange"] = o.skipRange
	}
	samples, examples, err := readSamples(filepath.Join(o.root, "config", "samples"))
	if err != nil {
		return nil, err
	}
	csv.Annotations["alm-examples"] = examples
	icon, err := os.ReadFile(filepath.Join(o.root, "config", "manifests", "icon.svg"))
	if err != nil {
		return nil, err
	}
	csv.Spec.Icon = []operatorsv1alpha1.Icon{{Data: base64.StdEncoding.EncodeToString(icon), MediaType: "image/svg+xml"}}
	api, err := loadAPITypes(o.root)
	if err != nil {
		return nil, err
	}
	csv.Spec.CustomResourceDefinitions.Owned, err = ownedCRDs(crds, api, samples)
	if err != nil {
		return nil, err
	}
	csv.Spec.WebhookDefinitions = conversionWebhooks(crds, dep.Name)
	csv.Spec.RelatedImages = []operatorsv1alpha1.RelatedImage{
		{Name: "okgoes-operator", Image: operatorImage},
		{Name: "redis", Image: defaultRedisImage},
	}

	var files []file
	csvData, err := marshal(csv)
	if err != nil {
		return nil, err
	}
	files = append(files, file{"bundle/manifests/" + packageName + ".clusterserviceversion.yaml", csvData})
	for _, crd := range crds {
		data, err := marshal(crd)
		if err != nil {
			return nil, err
		}
		files = append(files, file{"bundle/manifests/" + crd.Spec.Group + "_" + crd.Spec.Names.Plural + ".yaml", data})
	}
	for _, u := range others {
		if bound[u.GetKind()+"/"+u.GetName()] {
			continue // in the CSV's permissions
		}
		u.SetNamespace("")
		data, err := marshal(u.Object)
		if err != nil {
			return nil, err
		}
		gv := strings.ReplaceAll(u.GetAPIVersion(), "/", "_")
		files = append(files, file{"bundle/manifests/" + u.GetName() + "_" + gv + "_" + strings.ToLower(u.GetKind()) + ".yaml", data})
	}
	meta, err := metadataFiles(o, csv.Spec.MinKubeVersion)
	if err != nil {
		return nil, err
	}
	files = append(files, meta...)
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	return files, nil
}

// conversionWebhooks declares, for OLM, the conversion webhook of every CRD whose kustomize
// output converts by webhook: OLM then creates the Service, mounts a certificate into the
// manager (/tmp/k8s-webhook-server/serving-certs) and points the CRD at it with the CA.
func conversionWebhooks(crds []*apiextensionsv1.CustomResourceDefinition, deployment string) []operatorsv1alpha1.WebhookDescription {
	var names []string
	var path string
	for _, crd := range crds {
		c := crd.Spec.Conversion
		if c == nil || c.Strategy != apiextensionsv1.WebhookConverter || c.Webhook == nil || c.Webhook.ClientConfig == nil || c.Webhook.ClientConfig.Service == nil {
			continue
		}
		names = append(names, crd.Name)
		if p := c.Webhook.ClientConfig.Service.Path; p != nil {
			path = *p
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	none := admissionregistrationv1.SideEffectClassNone
	fail := admissionregistrationv1.Fail
	return []operatorsv1alpha1.WebhookDescription{{
		GenerateName:            "crdconvert.cache.okgoes.com",
		Type:                    operatorsv1alpha1.ConversionWebhook,
		DeploymentName:          deployment,
		ContainerPort:           443,
		TargetPort:              ptr(intstr.FromInt32(9443)),
		WebhookPath:             &path,
		AdmissionReviewVersions: []string{"v1"},
		SideEffects:             &none,
		FailurePolicy:           &fail,
		ConversionCRDs:          names,
	}}
}

func ptr[T any](v T) *T { return &v }

func kustomize(dir string) ([]*unstructured.Unstructured, error) {
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

func convert(u *unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
}

// marshal writes YAML with sorted keys and no status or creationTimestamp noise.
func marshal(obj any) ([]byte, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	return yaml.Marshal(m)
}

// setOperatorImage points the manager container and the images it hands to its own pods (the
// mover, RELATED_IMAGE_MOVER) at the released operator image, whatever config/manager was last
// set to by make deploy.
func setOperatorImage(dep *appsv1.Deployment, image string) error {
	for i := range dep.Spec.Template.Spec.Containers {
		c := &dep.Spec.Template.Spec.Containers[i]
		if c.Name != "manager" {
			continue
		}
		c.Image = image
		for j := range c.Env {
			if c.Env[j].Name == "RELATED_IMAGE_MOVER" {
				c.Env[j].Value = image
				return nil
			}
		}
		return fmt.Errorf("deployment %s: the manager container has no RELATED_IMAGE_MOVER", dep.Name)
	}
	return fmt.Errorf("deployment %s has no container named manager", dep.Name)
}
