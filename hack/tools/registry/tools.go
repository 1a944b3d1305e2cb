//go:build tools

// Package tools pins the OCI registry (CNCF distribution) that hack/tools/registry/build.sh builds
// into bin/registry for the local cluster (hack/local-cluster.sh).
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
