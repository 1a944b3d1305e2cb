//go:build tools

// Package tools pins the kopia CLI: build.sh builds it into bin/kopia.
package tools

import _ "github.com/kopia/kopia"
