// Package phase runs the phases of a reconcile: small named functions sharing a scope, run in
// order, stopping at the first error (whose class, see internal/errclass, decides what happens
// next).
package phase

import "context"

// Func is one phase over the reconcile's scope S.
type Func[S any] func(ctx context.Context, s S) error

// Run runs phases in order and returns the first error.
func Run[S any](ctx context.Context, s S, phases ...Func[S]) error {
	for _, p := range phases {
		if err := p(ctx, s); err != nil {
			return err
		}
	}
	return nil
}
