// Module dashboard generates the Grafana dashboard of okgoes-operator
// (config/grafana/okgoes-operator.json) with the Grafana Foundation SDK, kept apart from the
// operator's go.mod: the manager does not need it.
module github.com/okgoes/okgoes-operator/hack/tools/dashboard

go 1.26.0

require github.com/grafana/grafana-foundation-sdk/go v0.0.22
