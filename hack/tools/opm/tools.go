//go:build tools

// Package tools pins opm (operator-registry's CLI) for the Makefile: `make opm` builds it into
// bin/opm; `make catalog` and the hack/catalog test run `opm validate` with it when it exists.
package tools

import (
	_ "github.com/operator-framework/operator-registry/cmd/opm"
)
