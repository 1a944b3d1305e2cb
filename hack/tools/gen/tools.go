//go:build tools

// Package tools pins controller-gen and kustomize for the Makefile.
package tools

import (
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
	_ "sigs.k8s.io/kustomize/kustomize/v5"
)
