// Package manifests has no code: its tests build the kustomize trees under config/ with the
// kustomize library and check the result against a real API server (schema, RBAC, Pod Security).
package manifests
