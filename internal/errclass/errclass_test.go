package errclass

import (
	"errors"
	"fmt"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

func TestResult(t *testing.T) {
	transient := errors.New("connection refused")
	tests := []struct {
		name    string
		err     error
		requeue time.Duration
		want    ctrl.Result
		wantErr error
	}{
		{"converged", nil, 0, ctrl.Result{}, nil},
		{"waiting for the next tick", nil, 10 * time.Second, ctrl.Result{RequeueAfter: 10 * time.Second}, nil},
		{"stalled is not retried", Stalled("InvalidSpec", "x"), 10 * time.Second, ctrl.Result{}, nil},
		{"wrapped stalled is not retried", fmt.Errorf("phase: %w", Stalled("InvalidSpec", "x")), 0, ctrl.Result{}, nil},
		{"waiting is polled", Waiting("PVCNotFound", "x", 30*time.Second), 0, ctrl.Result{RequeueAfter: 30 * time.Second}, nil},
		{"waiting polls no later than an earlier wanted requeue", Waiting("PVCNotFound", "x", 30*time.Second), 5 * time.Second, ctrl.Result{RequeueAfter: 5 * time.Second}, nil},
		{"transient error backs off", transient, 10 * time.Second, ctrl.Result{}, transient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Result(tt.err, tt.requeue)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("Result = %+v, %v; want %+v, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestOf(t *testing.T) {
	wrapped := fmt.Errorf("check bucket: %w", Waiting("BucketNotFound", "bucket x does not exist", time.Second))
	for _, tt := range []struct {
		name string
		err  error
		want Verdict
	}{
		{"no error", nil, Verdict{Class: ClassNone}},
		{"stalled", Stalled("InvalidSpec", "bad"), Verdict{ClassStalled, "InvalidSpec", "bad"}},
		{"waiting, wrapped", wrapped, Verdict{ClassWaiting, "BucketNotFound", "bucket x does not exist"}},
		{"anything else", errors.New("connection reset"), Verdict{Class: ClassTransient}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Of(tt.err); got != tt.want {
				t.Errorf("Of(%v) = %+v, want %+v", tt.err, got, tt.want)
			}
		})
	}
}
