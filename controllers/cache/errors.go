package cache

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/okgoes/okgoes-operator/internal/errclass"
)

// classifyChildError turns the error of writing a child into its class (see internal/errclass).
// An API server 422 Invalid for a child built from the spec (a bad toleration, requests above
// limits, ...) means the user's spec produced it: InvalidSpec, not retried.
func classifyChildError(child string, err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsInvalid(err):
		return errclass.Stalled(ReasonInvalidSpec, fmt.Sprintf("the API server rejected the %s built from the spec: %v", child, err))
	default:
		if _, ok := errclass.AsStalled(err); ok {
			return err
		}
		return fmt.Errorf("ensure %s: %w", child, err)
	}
}

// errConflict is the Stalled error for a child whose name is taken by an object we do not control.
func errConflict(kind, name string) error {
	return errclass.Stalled(ReasonResourceConflict, fmt.Sprintf("%s %q exists and is not controlled by this RedisCache", kind, name))
}
