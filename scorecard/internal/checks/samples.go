package checks

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/okgoes/okgoes-operator/scorecard/internal/bundle"
)

// fieldManager names the scorecard tests in managedFields.
const fieldManager = "okgoes-scorecard"

type liveSample struct {
	obj   *unstructured.Unstructured
	gvr   schema.GroupVersionResource
	name  string
	ok    bool
	state string
}

// samplesReady creates every alm-example in the namespace, waits until the operator has
// reconciled each (see expectations), then deletes them and waits until they are gone, which
// takes the operator's finalizers into account. What it created is deleted whatever happened.
func samplesReady(ctx context.Context, env *Env, r *recorder) {
	b := env.Bundle
	if len(b.Samples) == 0 {
		r.errorf("the CSV has no alm-examples to create")
		return
	}
	var live []*liveSample
	defer func() { deleteAll(ctx, env, r, live) }()

	for _, s := range b.Samples {
		obj := s.DeepCopy()
		obj.SetNamespace(env.Namespace)
		name := bundle.SampleName(obj)
		gvr, err := b.Resource(obj)
		if err != nil {
			r.errorf("%s: %v", name, err)
			continue
		}
		if _, err := env.Client.Resource(gvr).Namespace(env.Namespace).Create(ctx, obj, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
			r.errorf("%s: create in namespace %s: %v", name, env.Namespace, err)
			continue
		}
		r.logf("%s: created", name)
		live = append(live, &liveSample{obj: obj, gvr: gvr, name: name})
	}

	start := time.Now()
	_ = wait.PollUntilContextTimeout(ctx, env.Poll, env.Timeout, true, func(ctx context.Context) (bool, error) {
		done := true
		for _, l := range live {
			if l.ok {
				continue
			}
			got, err := env.Client.Resource(l.gvr).Namespace(env.Namespace).Get(ctx, l.obj.GetName(), metav1.GetOptions{})
			if err != nil {
				l.state = "get: " + err.Error()
				done = false
				continue
			}
			l.ok, l.state = expectationFor(got.GetKind()).check(got)
			if l.ok {
				r.logf("%s: reconciled after %s: %s", l.name, time.Since(start).Round(100*time.Millisecond), l.state)
			}
			done = done && l.ok
		}
		return done, nil
	})
	for _, l := range live {
		if !l.ok {
			e := expectationFor(l.obj.GetKind())
			r.errorf("%s: not reconciled within %s: %s; want observedGeneration == generation and %s", l.name, env.Timeout, l.state, describe(e))
		} else if e := expectationFor(l.obj.GetKind()); e.why != "" {
			r.logf("%s: %s is asked for, not full success: %s", l.name, describe(e), e.why)
		}
	}
}

func describe(e expectation) string {
	s := e.condition + " condition"
	if e.status != "" {
		s = e.condition + "=" + e.status
	}
	if e.reasons != nil {
		s += " with a documented reason"
	}
	return s
}

// deleteAll deletes what samplesReady created, newest first, and waits until each is gone. It
// has a deadline of its own: it also runs after the wait above used its time up.
func deleteAll(parent context.Context, env *Env, r *recorder, live []*liveSample) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), env.Timeout)
	defer cancel()
	for i := len(live) - 1; i >= 0; i-- {
		l := live[i]
		res := env.Client.Resource(l.gvr).Namespace(env.Namespace)
		if cur, err := res.Get(ctx, l.obj.GetName(), metav1.GetOptions{}); err == nil && len(cur.GetFinalizers()) > 0 {
			r.logf("%s: deleting; finalizers %v", l.name, cur.GetFinalizers())
		}
		if err := res.Delete(ctx, l.obj.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			r.errorf("%s: delete: %v", l.name, err)
		}
	}
	start := time.Now()
	for i := len(live) - 1; i >= 0; i-- {
		l := live[i]
		res := env.Client.Resource(l.gvr).Namespace(env.Namespace)
		var last *unstructured.Unstructured
		err := wait.PollUntilContextCancel(ctx, env.Poll, true, func(ctx context.Context) (bool, error) {
			cur, err := res.Get(ctx, l.obj.GetName(), metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			if err == nil {
				last = cur
			}
			return false, nil
		})
		if err != nil {
			msg := ""
			if last != nil {
				msg = "; finalizers " + join(last.GetFinalizers())
			}
			r.errorf("%s: still there %s after it was deleted%s", l.name, env.Timeout, msg)
			continue
		}
		r.logf("%s: deleted and gone (%s)", l.name, time.Since(start).Round(100*time.Millisecond))
	}
}

func join(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	out := ""
	for i, x := range sortedCopy(s) {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}
