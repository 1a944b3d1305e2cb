// Package storagekit is what the PVCBackup and PVCRestore controllers both use, and nothing that
// only one of them does: the dependencies they share (Deps: uncached reads, clock, S3, the mover
// image) and the reading of credentials Secrets (s3.go) with their cache (s3cache.go), the catalog
// of the backups under a prefix (catalog.go), the mover Job's spec and the interpretation of its
// end (moverjob_spec.go, moverjob.go), the names of backups and run objects (naming.go), the
// freshness check before a create (freshness.go), the handling of an API server outage
// (apioutage.go), the condition reasons both report (reasons.go), the shapes every reconcile has
// (reconcile.go: create once, one status write, retry soon) and what differs per backup engine,
// picked once (engine.go: EngineFor, ManifestEngine).
//
// It imports neither controller package: a controller that needs something of the other's moves
// it here, or the compiler says no.
package storagekit
