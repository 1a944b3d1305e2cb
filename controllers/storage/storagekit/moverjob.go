package storagekit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/okgoes/okgoes-operator/internal/mover"
)

// Reasons of a mover Job that the mover itself cannot report (the others are mover.Reason).
const (
	ReasonDeadlineExceeded = "DeadlineExceeded" // the run outlived spec.mover.activeDeadlineSeconds
	ReasonMoverKilled      = "MoverKilled"      // the mover container was killed (OOMKilled, SIGKILL) before it could report
	ReasonMoverFailed      = "MoverFailed"      // the Job failed and the mover left no report
	ReasonWaitingForPod    = "WaitingForPod"    // the mover pod is not running yet (scheduling, image pull, volume)
)

// DeadlineGrace is how long after a run's deadline the controller waits for the Job controller's
// own DeadlineExceeded verdict (and the mover's report of the interruption) before it ends the run
// itself: the Job controller may be slow, or absent.
const DeadlineGrace = 2 * time.Minute

// MoverJobState is what a mover Job (backup, verify or restore) is doing, read from the Job, its
// pod, and the mover's report in the pod's termination message. The one place Job and pod
// states are interpreted.
type MoverJobState struct {
	Finished, Failed bool
	// result is the mover's own report, when it wrote one.
	Result   mover.Result
	Reported bool
	// reason and message of a failure (finished && failed).
	Reason, Message string
	// waiting and waitingMessage say why a Job that has not finished has no running mover.
	Waiting, WaitingMessage string
	// deadline is when the run must be over.
	Deadline time.Time
}

// stage is the Running reason and message of an unfinished Job: running is the reason while the
// mover runs, what names the work in messages.
func (st MoverJobState) Stage(running, what string) (string, string) {
	if st.Waiting != "" {
		return ReasonWaitingForPod, fmt.Sprintf("%s waits for its mover pod: %s: %s (the run fails at %s if it never starts)",
			what, st.Waiting, st.WaitingMessage, st.Deadline.UTC().Format(time.RFC3339))
	}
	return running, ""
}

// requeue is the next look at an unfinished Job: the poll interval, or the deadline (and its
// grace) if sooner.
func (st MoverJobState) Requeue(now time.Time, poll time.Duration) time.Duration {
	return min(poll, max(st.Deadline.Add(DeadlineGrace).Sub(now)+time.Second, time.Second))
}

// jobState reads a mover Job of a run that started at start and may last deadlineSeconds.
func (d Deps) ReadMoverJob(ctx context.Context, job *batchv1.Job, start, now time.Time, deadlineSeconds int64) MoverJobState {
	st := MoverJobState{Deadline: start.Add(time.Duration(deadlineSeconds) * time.Second)}
	running := ptr.Deref(job.Status.Ready, 0) > 0
	noPodYet := job.Status.Active+job.Status.Failed+job.Status.Succeeded == 0
	if (running || noPodYet) && !jobEnded(job) && !now.After(st.Deadline.Add(DeadlineGrace)) {
		// A running mover pod holds no report yet and no reason to wait, and a Job whose pods the
		// Job controller has not counted yet (a run that just started) has none to read: the pods
		// are not listed (uncached) at every poll of a running backup, nor at each of the many
		// run starts of one minute (issue 13). A Job without a pod says itself why (jobWaiting).
		if noPodYet {
			st.Waiting, st.WaitingMessage = d.jobWaiting(ctx, job, now.Sub(start))
		}
		return st
	}
	pods := &corev1.PodList{}
	if err := d.APIReader.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{"job-name": job.Name}); err != nil {
		pods.Items = nil // the Job's conditions alone still decide; the report only adds detail
	}
	var term *corev1.ContainerStateTerminated
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && cs.Name == MoverContainer {
				term = t
			}
		}
	}
	if term != nil && term.Message != "" {
		if err := json.Unmarshal([]byte(term.Message), &st.Result); err == nil && st.Result.Result != "" {
			st.Reported = true
		}
	}

	var failedCond *batchv1.JobCondition
	for i, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			st.Finished = true
			if st.Reported && !st.Result.Succeeded() { // cannot happen with our mover; never trust it
				st.Failed, st.Reason, st.Message = true, string(st.Result.Reason), "mover: "+st.Result.Message
			}
			return st
		case batchv1.JobFailed:
			failedCond = &job.Status.Conditions[i]
		}
	}
	limit := time.Duration(deadlineSeconds) * time.Second
	switch {
	case failedCond != nil:
		st.Finished, st.Failed = true, true
		switch {
		case failedCond.Reason == batchv1.JobReasonDeadlineExceeded:
			st.Reason = ReasonDeadlineExceeded
			st.Message = fmt.Sprintf("the run did not finish within its deadline of %v (spec.mover.activeDeadlineSeconds); the Job stopped it", limit)
			if st.Reported {
				st.Message += "; mover: " + st.Result.Message
			}
		case st.Reported:
			st.Reason = string(st.Result.Reason)
			if st.Reason == "" {
				st.Reason = ReasonMoverFailed
			}
			st.Message = "mover: " + strings.TrimPrefix(st.Result.Message, "mover: ")
		case term != nil:
			st.Reason = ReasonMoverKilled
			st.Message = fmt.Sprintf("the mover container exited with code %d (%s) without a report", term.ExitCode, orDefault(term.Reason, "no reason given"))
			if term.Signal != 0 {
				st.Message += fmt.Sprintf(", signal %d", term.Signal)
			}
			if term.Message != "" {
				st.Message += "; last output: " + Truncate(strings.TrimSpace(term.Message), 512)
			}
			st.Message += fmt.Sprintf("; Job: %s: %s", failedCond.Reason, failedCond.Message)
		default:
			st.Reason = ReasonMoverFailed
			st.Message = fmt.Sprintf("mover Job failed: %s: %s", failedCond.Reason, failedCond.Message)
		}
		return st
	case now.After(st.Deadline.Add(DeadlineGrace)):
		st.Finished, st.Failed, st.Reason = true, true, ReasonDeadlineExceeded
		st.Message = fmt.Sprintf("the run did not finish within its deadline of %v (spec.mover.activeDeadlineSeconds) and its Job did not end; the Job is deleted", limit)
		return st
	}
	st.Waiting, st.WaitingMessage = podWaiting(pods.Items)
	return st
}

// noPodGrace is how long a Job may have no pod before its events are read for the reason: the
// Job controller creates the pod within a second or two, and the reconcile that records a run
// (at each of the many run starts of one minute, issue 13) must cost no request beyond its
// status write.
const noPodGrace = 10 * time.Second

// ReasonNoPodYet is the waiting reason of a Job whose pod the Job controller has not created yet
// (and that reports no reason why).
const ReasonNoPodYet = "NoPodYet"

// jobWaiting says why a Job that has not ended has no pod, age after its run started: the Job's
// Suspended condition (a queueing system such as Kueue holds it), or the Job controller's last
// warning event about it (FailedCreate: a ResourceQuota, an admission webhook or Pod Security
// Admission refused the pod; the event is where the Job controller says so, the Job's status has
// no field for it). Events are read (one uncached list, only of this Job's) once the Job has had
// noPodGrace to create its pod.
func (d Deps) jobWaiting(ctx context.Context, job *batchv1.Job, age time.Duration) (reason, message string) {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobSuspended && c.Status == corev1.ConditionTrue {
			return "JobSuspended", fmt.Sprintf("Job %s is suspended: %s", job.Name, orDefault(c.Message, c.Reason))
		}
	}
	noPod := fmt.Sprintf("Job %s has no pod yet", job.Name)
	if age < noPodGrace || d.APIReader == nil {
		return ReasonNoPodYet, noPod
	}
	events := &corev1.EventList{}
	err := d.APIReader.List(ctx, events, client.InNamespace(job.Namespace),
		client.MatchingFields{"involvedObject.uid": string(job.UID)})
	if err != nil {
		return ReasonNoPodYet, noPod + " (its events could not be read: " + err.Error() + ")"
	}
	if e := lastWarning(events.Items); e != nil {
		return e.Reason, fmt.Sprintf("Job %s: %s", job.Name, Truncate(e.Message, 1024))
	}
	return ReasonNoPodYet, noPod + " and no event says why (is the Job controller of kube-controller-manager running?)"
}

// lastWarning is the most recent Warning event of events, nil if none.
func lastWarning(events []corev1.Event) *corev1.Event {
	var last *corev1.Event
	var lastAt time.Time
	for i, e := range events {
		if e.Type != corev1.EventTypeWarning {
			continue
		}
		at := e.LastTimestamp.Time
		if e.Series != nil && e.Series.LastObservedTime.After(at) {
			at = e.Series.LastObservedTime.Time
		}
		if e.EventTime.After(at) {
			at = e.EventTime.Time
		}
		if last == nil || !at.Before(lastAt) {
			last, lastAt = &events[i], at
		}
	}
	return last
}

// jobEnded tells whether the Job has a Complete or Failed condition.
func jobEnded(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return true
		}
	}
	return false
}

// podWaiting says why the pods of a Job run no mover yet ("" when one runs or has run).
func podWaiting(pods []corev1.Pod) (reason, message string) {
	if len(pods) == 0 {
		return "", "" // the Job controller creates it in a moment; the deadline covers one that never does
	}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodPending {
			return "", ""
		}
	}
	p := pods[len(pods)-1]
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return w.Reason, fmt.Sprintf("pod %s: %s", p.Name, orDefault(w.Message, w.Reason))
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return orDefault(c.Reason, "Unschedulable"), fmt.Sprintf("pod %s: %s", p.Name, c.Message)
		}
	}
	return "Pending", fmt.Sprintf("pod %s is pending", p.Name)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// RemainingSeconds is the activeDeadlineSeconds of a Job created at now in a run that must be over
// by deadline (at least a minute, so that a late Job still gets to report).
func RemainingSeconds(deadline, now time.Time) int64 {
	return max(int64(deadline.Sub(now)/time.Second), 60)
}
