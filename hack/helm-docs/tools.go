//go:build tools

// Package tools pins helm-docs, which `make docs` builds into _output/bin to
// write charts/cluster-gateway/README.md (the values table, from the `# --`
// comments of values.yaml) and `make verify` runs to check it is current. A
// module of its own, like hack/helm, so its dependencies (an older helm among
// them) stay out of the other modules' graphs.
package tools

import (
	_ "github.com/norwoodj/helm-docs/cmd/helm-docs"
)
