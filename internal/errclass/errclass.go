// Package errclass holds the error classes every reconciler of this operator uses, and the one
// function that maps them to a controller-runtime result:
//
//   - Stalled: the spec cannot be acted on until a human changes something (InvalidSpec,
//     InvalidSchedule, a name conflict). Reported in a condition, never retried: the next spec
//     change (a new generation) brings the next reconcile.
//   - Waiting: something outside the operator is expected to appear (a Secret, a PVC, a ready
//     snapshot). Reported in a condition and polled with RequeueAfter, never with backoff.
//   - anything else is transient (API server, S3 hiccup): returned for exponential backoff.
package errclass

import (
	"errors"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// StalledError needs a human; see the package documentation.
type StalledError struct {
	Reason  string
	Message string
}

func (e *StalledError) Error() string { return e.Reason + ": " + e.Message }

// WaitingError is polled after After; see the package documentation.
type WaitingError struct {
	Reason  string
	Message string
	After   time.Duration
}

func (e *WaitingError) Error() string { return e.Reason + ": " + e.Message }

// Stalled returns a StalledError.
func Stalled(reason, message string) error { return &StalledError{Reason: reason, Message: message} }

// Waiting returns a WaitingError polled after the given duration.
func Waiting(reason, message string, after time.Duration) error {
	return &WaitingError{Reason: reason, Message: message, After: after}
}

// AsStalled reports whether err is (or wraps) a StalledError.
func AsStalled(err error) (*StalledError, bool) {
	var s *StalledError
	ok := errors.As(err, &s)
	return s, ok
}

// AsWaiting reports whether err is (or wraps) a WaitingError.
func AsWaiting(err error) (*WaitingError, bool) {
	var w *WaitingError
	ok := errors.As(err, &w)
	return w, ok
}

// Result maps the error class of a reconcile to what controller-runtime should do next.
// requeue is the RequeueAfter wanted when nothing failed (e.g. the next scheduled time).
func Result(err error, requeue time.Duration) (ctrl.Result, error) {
	if err == nil {
		return ctrl.Result{RequeueAfter: requeue}, nil
	}
	if _, ok := AsStalled(err); ok {
		return ctrl.Result{}, nil
	}
	if w, ok := AsWaiting(err); ok {
		after := w.After
		if requeue > 0 && requeue < after {
			after = requeue
		}
		return ctrl.Result{RequeueAfter: after}, nil
	}
	return ctrl.Result{}, err
}

// Class is what the error of a reconcile says for the object's status.
type Class int

const (
	// ClassNone: the reconcile succeeded.
	ClassNone Class = iota
	// ClassStalled: a StalledError; its reason and message are the condition's.
	ClassStalled
	// ClassWaiting: a WaitingError; its reason and message are the condition's.
	ClassWaiting
	// ClassTransient: any other error. The status keeps its last observation: the reconcile
	// learned nothing new, and does not claim the generation was acted on.
	ClassTransient
)

// Verdict is the class of a reconcile's error with the reason and message a condition shows
// for it (empty for ClassNone and ClassTransient).
type Verdict struct {
	Class           Class
	Reason, Message string
}

// Of classifies err for status: the one place a reconciler's status setter turns its error into
// a condition's reason and message.
func Of(err error) Verdict {
	if err == nil {
		return Verdict{Class: ClassNone}
	}
	if s, ok := AsStalled(err); ok {
		return Verdict{Class: ClassStalled, Reason: s.Reason, Message: s.Message}
	}
	if w, ok := AsWaiting(err); ok {
		return Verdict{Class: ClassWaiting, Reason: w.Reason, Message: w.Message}
	}
	return Verdict{Class: ClassTransient}
}
