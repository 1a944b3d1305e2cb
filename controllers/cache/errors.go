package cache

import (
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
)

// The error classes of a reconcile. Every phase returns one of these (or a plain error, which
// means "transient: retry with backoff"), and resultFor maps them to a result in one place.

// stalledError means the spec cannot be acted on until a human changes something. It becomes
// Ready=False/Degraded=True with its Reason and is not retried: the next spec change (a new
// generation) triggers the next reconcile.
type stalledError struct {
	reason  string
	message string
}

func (e *stalledError) Error() string { return e.reason + ": " + e.message }

// waitingError means the reconcile depends on something outside the operator's control that is
// expected to appear (a Secret, say). It is polled with RequeueAfter, never with backoff.
type waitingError struct {
	reason  string
	message string
	after   time.Duration
}

func (e *waitingError) Error() string { return e.reason + ": " + e.message }

// invalidSpec wraps an error the API server returned for a child built from the spec (a 422
// Invalid, e.g. a bad toleration or requests above limits) as a stalled InvalidSpec.
func invalidSpec(child string, err error) error {
	return &stalledError{reason: ReasonInvalidSpec, message: fmt.Sprintf("the API server rejected the %s built from the spec: %v", child, err)}
}

// classifyChildError turns the error of writing a child into its class.
func classifyChildError(child string, err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsInvalid(err):
		return invalidSpec(child, err)
	default:
		return fmt.Errorf("ensure %s: %w", child, err)
	}
}

// resultFor maps the error class of a reconcile to what controller-runtime should do next.
// requeue is the RequeueAfter wanted when nothing failed (e.g. waiting for replicas).
func resultFor(err error, requeue time.Duration) (ctrl.Result, error) {
	var stalled *stalledError
	var waiting *waitingError
	switch {
	case err == nil:
		return ctrl.Result{RequeueAfter: requeue}, nil
	case errors.As(err, &stalled):
		return ctrl.Result{}, nil
	case errors.As(err, &waiting):
		return ctrl.Result{RequeueAfter: waiting.after}, nil
	default:
		return ctrl.Result{}, err
	}
}
