//go:build tools

// Package tools pins promtool, which make test runs on config/prometheus (check rules, test rules:
// TestAlertRules), and the Prometheus server of the e2e suite's alert story (TestAlertsFireInARealPrometheus,
// image okgoes.local/prometheus:e2e). Built with -tags remove_all_sd (Makefile): rules need no service discovery,
// and it leaves the cloud SDKs of the discovery plugins out of the build.
//
// github.com/prometheus/prometheus v0.316.0 (Prometheus 3.16) is the newest the module proxy
// serves and builds against k8s.io v0.37.x; go.mod raises k8s.io/* to the operator's v0.37.2 so
// the Kubernetes packages promtool shares with the operator build once.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
