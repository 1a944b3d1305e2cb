//go:build tools

// Package tools pins the MinIO server that hack/envtest-assets.sh builds into bin/minio.
package tools

import _ "github.com/minio/minio"
