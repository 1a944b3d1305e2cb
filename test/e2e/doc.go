// Package e2e holds the end-to-end suite (build tag e2e, `make test-e2e`): the operator deployed with
// `make deploy` onto a real cluster — by default the single-node cluster of hack/local-cluster.sh —
// where the kubelet runs real Redis, MinIO and mover pods. `go test ./...` compiles nothing here.
package e2e
