// Package e2e holds the end-to-end suite (build tag e2e, `make test-e2e`): the operator deployed with
// `make deploy` onto a real cluster — by default the single-node cluster of hack/local-cluster.sh —
// where the kubelet runs real Redis, MinIO and mover pods. `go test ./...` compiles nothing here.
//
// Most of the suite's time is waiting: for pods to start, for the kubelet to refresh a mounted
// Secret, for a mover Job. So the tests that share nothing but the operator (each in its own
// namespace, with its own MinIO, claims and caches) call alongside(t), which is t.Parallel: go test
// runs them together (-parallel, 2 by default on two cores) once the others have finished one by
// one. A test stays sequential when it changes what the others use (TestSnapshotOfAStoppedDriverEndsTheRun
// stops the CSI driver, TestNoDefaultSnapshotClassIsReported unmarks the default snapshot class) or
// counts the operator's work across namespaces (TestBadInputGivesConditionsWithoutHotLoop reads
// the operator's PVCBackup reconcile counter).
package e2e
