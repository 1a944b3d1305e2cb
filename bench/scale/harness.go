package main

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
)

const (
	nsSystem    = "okgoes-system"
	nsBackups   = "backups"
	nsCaches    = "caches"
	nsScheduled = "scheduled"
	nsForeign   = "foreign"
	nsFloor     = "floor"
	bucket      = "scale"
	credsSecret = "s3-credentials"
	creators    = 16 // concurrent creates of the harness
)

// harness creates the objects and measures the manager.
type harness struct {
	c   client.Client
	cp  *controlPlane
	s3  *minioServer
	mgr *managerProcess
}

func newHarness(cp *controlPlane, s3 *minioServer) (*harness, error) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(storagev1.AddToScheme(scheme))
	utilruntime.Must(cachev1beta1.AddToScheme(scheme))
	c, err := client.New(cp.cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return &harness{c: c, cp: cp, s3: s3}, nil
}

// setup makes the namespaces, the bucket and the credentials Secret of each backup namespace.
func (h *harness) setup(ctx context.Context) error {
	for _, ns := range []string{nsSystem, nsBackups, nsCaches, nsScheduled, nsForeign, nsFloor} {
		if err := h.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	for _, ns := range []string{nsBackups, nsScheduled} {
		if err := h.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: credsSecret},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": h.s3.accessKey, "AWS_SECRET_ACCESS_KEY": h.s3.secretKey,
				storagev1.DefaultRepositoryPasswordKey: "scale-password"}}); err != nil {
			return err
		}
	}
	return h.s3.makeBucket(ctx, bucket)
}

// createAll creates n objects built by obj, creators at a time.
func (h *harness) createAll(ctx context.Context, n int, obj func(i int) client.Object) error {
	var wg sync.WaitGroup
	errs := make(chan error, creators)
	next := make(chan int)
	for range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := h.c.Create(ctx, obj(i)); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// createBackups creates n PVCs and a PVCBackup of each in ns, on schedule (UTC).
func (h *harness) createBackups(ctx context.Context, ns string, n int, schedule string) error {
	err := h.createAll(ctx, n, func(i int) client.Object {
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("data-%05d", i)},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}
	})
	if err != nil {
		return fmt.Errorf("create PVCs: %w", err)
	}
	err = h.createAll(ctx, n, func(i int) client.Object {
		return &storagev1.PVCBackup{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("app-%05d", i)},
			Spec: storagev1.PVCBackupSpec{
				PVCName: fmt.Sprintf("data-%05d", i), Schedule: schedule, TimeZone: ptr.To("UTC"),
				S3Bucket: bucket, Engine: storagev1.EngineKopia,
				S3: storagev1.S3Location{Endpoint: h.s3.endpoint, Insecure: true, Prefix: fmt.Sprintf("%s/app-%05d/", ns, i),
					CredentialsSecretRef: storagev1.CredentialsSecretRef{Name: credsSecret}},
			},
		}
	})
	if err != nil {
		return fmt.Errorf("create PVCBackups: %w", err)
	}
	return nil
}

// createCaches creates n RedisCaches of one replica.
func (h *harness) createCaches(ctx context.Context, n int) error {
	return h.createAll(ctx, n, func(i int) client.Object {
		return &cachev1beta1.RedisCache{
			ObjectMeta: metav1.ObjectMeta{Namespace: nsCaches, Name: fmt.Sprintf("cache-%05d", i)},
			Spec:       cachev1beta1.RedisCacheSpec{Replicas: ptr.To[int32](1)},
		}
	})
}

// convergedBackups counts the PVCBackups of ns whose status describes their generation.
func (h *harness) convergedBackups(ctx context.Context, ns string) (int, error) {
	list := &storagev1.PVCBackupList{}
	if err := h.c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	n := 0
	for _, pb := range list.Items {
		if pb.Status.ObservedGeneration == pb.Generation {
			n++
		}
	}
	return n, nil
}

// convergedCaches counts the RedisCaches whose status describes their generation.
func (h *harness) convergedCaches(ctx context.Context) (int, error) {
	list := &cachev1beta1.RedisCacheList{}
	if err := h.c.List(ctx, list, client.InNamespace(nsCaches)); err != nil {
		return 0, err
	}
	n := 0
	for _, rc := range list.Items {
		if rc.Status.ObservedGeneration == rc.Generation {
			n++
		}
	}
	return n, nil
}

// convergence is what reaching a steady state for n objects cost.
type convergence struct {
	name     string
	n        int
	took     time.Duration
	requests requestStats
	s3       map[string]int
	rss      int64
}

// measureConvergence waits until converged counts n objects and reports the manager's requests
// from t0 until then.
func (h *harness) measureConvergence(ctx context.Context, name string, n int, t0 time.Time, timeout time.Duration,
	converged func(context.Context) (int, error)) (convergence, error) {
	s3Before := h.s3.counts()
	deadline := t0.Add(timeout)
	last := -1
	for {
		got, err := converged(ctx)
		if err != nil {
			return convergence{}, err
		}
		if got != last {
			progress(fmt.Sprintf("%s: %d/%d converged", name, got, n))
			last = got
		}
		if got >= n {
			break
		}
		if time.Now().After(deadline) {
			return convergence{}, fmt.Errorf("%s: only %d of %d objects converged within %v", name, got, n, timeout)
		}
		if err := h.mgr.alive(); err != nil {
			return convergence{}, err
		}
		time.Sleep(time.Second)
	}
	t1 := time.Now()
	reqs, err := h.cp.audit.between(t0, t1)
	if err != nil {
		return convergence{}, err
	}
	rss, _ := h.mgr.rss()
	return convergence{name: name, n: n, took: t1.Sub(t0), requests: summarise(reqs, n), s3: diffCounts(s3Before, h.s3.counts()), rss: rss}, nil
}

// rest is the manager's activity over a window in which nothing changes.
type restWindow struct {
	name       string
	n          int
	window     time.Duration
	reconciles map[string]float64 // per controller, per second
	requests   requestStats
	s3         map[string]int
	rss, heap  int64
}

func (h *harness) measureRest(ctx context.Context, name string, window time.Duration, n int) (restWindow, error) {
	progress(fmt.Sprintf("%s: settling 5s, then measuring %v", name, window))
	time.Sleep(5 * time.Second)
	m0, err := h.mgr.metrics()
	if err != nil {
		return restWindow{}, err
	}
	s3Before := h.s3.counts()
	t0 := time.Now()
	time.Sleep(window)
	m1, err := h.mgr.metrics()
	if err != nil {
		return restWindow{}, err
	}
	t1 := time.Now()
	reqs, err := h.cp.audit.between(t0, t1)
	if err != nil {
		return restWindow{}, err
	}
	secs := t1.Sub(t0).Seconds()
	r := restWindow{name: name, n: n, window: t1.Sub(t0), reconciles: map[string]float64{}, requests: summarise(reqs, n),
		s3: diffCounts(s3Before, h.s3.counts()), heap: int64(m1["go_memstats_heap_inuse_bytes"])}
	for k, v := range m1 {
		if c, ok := strings.CutPrefix(k, "controller_runtime_reconcile_total/"); ok {
			r.reconciles[c] = (v - m0[k]) / secs
		}
	}
	r.rss, _ = h.mgr.rss()
	return r, nil
}

// schedule is the lag of runs due in the same minute.
type scheduleLag struct {
	n                 int
	due               time.Time
	convergedBefore   time.Duration // how long before the due minute every PVCBackup had converged
	created           int
	p50, p90, p99, mx time.Duration
	requests          requestStats
	s3                map[string]int
	// floor is how long the harness itself took to create as many Jobs, creators at a time:
	// the API server's share of the lag of the last run, with no manager in between. moverFloor is
	// the same for copies of the manager's own mover Jobs (larger than floorJob).
	floor, moverFloor time.Duration
}

// measureSchedule creates n PVCBackups due in the same minute and measures when the manager
// creates each one's Job (the audit log's receive time of the create).
func (h *harness) measureSchedule(ctx context.Context, n int) (scheduleLag, error) {
	lead := 60*time.Second + time.Duration(n)*40*time.Millisecond
	due := time.Now().Add(lead).Truncate(time.Minute).Add(time.Minute)
	progress(fmt.Sprintf("creating %d PVCBackups due at %s", n, due.UTC().Format("15:04:05")))
	if err := h.createBackups(ctx, nsScheduled, n, fmt.Sprintf("%d %d * * *", due.UTC().Minute(), due.UTC().Hour())); err != nil {
		return scheduleLag{}, err
	}
	res := scheduleLag{n: n, due: due}
	for {
		got, err := h.convergedBackups(ctx, nsScheduled)
		if err != nil {
			return res, err
		}
		if got >= n {
			res.convergedBefore = time.Until(due)
			break
		}
		if time.Now().After(due) {
			progress(fmt.Sprintf("only %d/%d PVCBackups converged before they were due", got, n))
			break
		}
		time.Sleep(time.Second)
	}
	time.Sleep(time.Until(due))
	s3Before := h.s3.counts()
	progress("due: waiting for the Jobs")
	// Counted in the audit log, not by listing the Jobs: a list of up to n Jobs every second would
	// take from the API server's CPU what the manager's creates need.
	for deadline := due.Add(5 * time.Minute); ; time.Sleep(time.Second) {
		reqs, err := h.cp.audit.between(due, time.Now())
		if err != nil {
			return res, err
		}
		if len(jobCreates(reqs)) >= n || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(2 * time.Second) // the audit log of any last creates
	reqs, err := h.cp.audit.between(due, time.Now())
	if err != nil {
		return res, err
	}
	var lags []time.Duration
	var last time.Time
	for _, r := range jobCreates(reqs) {
		lags = append(lags, r.received.Sub(due))
		if r.received.After(last) {
			last = r.received
		}
	}
	res.created = len(lags)
	if len(lags) == 0 {
		return res, fmt.Errorf("no Job was created for %d PVCBackups due at %s", n, due)
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	pct := func(p float64) time.Duration { return lags[min(len(lags)-1, int(p*float64(len(lags))))] }
	res.p50, res.p90, res.p99, res.mx = pct(0.50), pct(0.90), pct(0.99), lags[len(lags)-1]
	var start []request
	for _, r := range reqs {
		if !r.received.After(last) {
			start = append(start, r)
		}
	}
	res.requests = summarise(start, n)
	res.s3 = diffCounts(s3Before, h.s3.counts())
	// The manager still records the runs it started (a status patch each): the floor is the API
	// server with no other work, so it waits for them.
	if err := h.waitForNoWrites(2*time.Second, time.Minute); err != nil {
		return res, err
	}
	progress(fmt.Sprintf("the floor: %d Job creates by the harness, %d at a time", n, creators))
	t0 := time.Now()
	if err := h.createAll(ctx, n, floorJob); err != nil {
		return res, fmt.Errorf("floor Jobs: %w", err)
	}
	res.floor = time.Since(t0)

	jobs := &batchv1.JobList{}
	if err := h.c.List(ctx, jobs, client.InNamespace(nsScheduled)); err != nil {
		return res, err
	}
	progress(fmt.Sprintf("the floor: %d copies of the manager's Jobs created by the harness, %d at a time", len(jobs.Items), creators))
	t0 = time.Now()
	if err := h.createAll(ctx, len(jobs.Items), func(i int) client.Object { return moverFloorJob(&jobs.Items[i]) }); err != nil {
		return res, fmt.Errorf("floor copies of the mover Jobs: %w", err)
	}
	res.moverFloor = time.Since(t0)
	// Removed, so that the manager's cache holds only its own Jobs in the next measurement.
	if err := h.c.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(nsFloor),
		client.MatchingLabels{"app.kubernetes.io/managed-by": "okgoes-operator"},
		client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		return res, fmt.Errorf("delete the floor's copies: %w", err)
	}
	return res, nil
}

// moverFloorJob is a copy of a mover Job the manager created, without its owner: the manager's
// Job informer receives it as it receives its own (that watch is part of the API server's work
// for each create), and no reconcile follows.
func moverFloorJob(job *batchv1.Job) client.Object {
	c := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: nsFloor, Name: "copy-" + job.Name,
		Labels: maps.Clone(job.Labels), Annotations: job.Annotations}, Spec: *job.Spec.DeepCopy()}
	// The API server set the selector and its label from the Job's uid: a copy gets its own.
	c.Spec.Selector, c.Spec.ManualSelector = nil, nil
	for _, k := range []string{"controller-uid", "batch.kubernetes.io/controller-uid", "job-name", "batch.kubernetes.io/job-name"} {
		delete(c.Spec.Template.Labels, k)
	}
	return c
}

// waitForNoWrites waits until the manager has written nothing for quiet, at most limit.
func (h *harness) waitForNoWrites(quiet, limit time.Duration) error {
	start := time.Now()
	for {
		reqs, err := h.cp.audit.between(start.Add(-quiet), time.Now())
		if err != nil {
			return err
		}
		var last time.Time
		for _, r := range reqs {
			if r.write() && r.received.After(last) {
				last = r.received
			}
		}
		if time.Since(last) >= quiet || time.Since(start) >= limit {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// jobCreates are the manager's successful creates of the scheduled PVCBackups' Jobs.
func jobCreates(reqs []request) []request {
	var out []request
	for _, r := range reqs {
		if r.verb == "create" && r.resource == "jobs" && r.namespace == nsScheduled && r.code == 201 {
			out = append(out, r)
		}
	}
	return out
}

// floorJob is a suspended Job of the size of a mover Job, in a namespace the manager ignores.
func floorJob(i int) client.Object {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: nsFloor, Name: fmt.Sprintf("floor-%05d", i),
			Labels: map[string]string{"app": "floor", "storage.okgoes.com/run": "20261205T000000Z"}},
		Spec: batchv1.JobSpec{
			Suspend: ptr.To(true), BackoffLimit: ptr.To[int32](0), ActiveDeadlineSeconds: ptr.To[int64](3600),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "mover", Image: "example.invalid/okgoes-operator:scale",
					Args:         []string{"mover", "backup"},
					Env:          []corev1.EnvVar{{Name: "S3_ENDPOINT", Value: "http://127.0.0.1:9000"}, {Name: "S3_BUCKET", Value: bucket}},
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true}}}},
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: fmt.Sprintf("data-%05d", i), ReadOnly: true}}}},
			}},
		},
	}
}

// foreign is the manager's memory before and after unrelated objects were added.
type foreign struct {
	n                     int
	rssBefore, rssAfter   int64
	heapBefore, heapAfter int64
	requests              requestStats
}

func (h *harness) measureForeign(ctx context.Context, n int, window time.Duration) (foreign, error) {
	res := foreign{n: n}
	m, err := h.mgr.metrics()
	if err != nil {
		return res, err
	}
	res.rssBefore, _ = h.mgr.rss()
	res.heapBefore = int64(m["go_memstats_heap_inuse_bytes"])
	t0 := time.Now()
	payload := strings.Repeat("x", 1024)
	err = h.createAll(ctx, n, func(i int) client.Object {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: nsForeign, Name: fmt.Sprintf("other-%05d", i),
			Labels: map[string]string{"app": "someone-else"}}, Data: map[string]string{"config": payload}}
	})
	if err != nil {
		return res, err
	}
	time.Sleep(window)
	m, err = h.mgr.metrics()
	if err != nil {
		return res, err
	}
	res.rssAfter, _ = h.mgr.rss()
	res.heapAfter = int64(m["go_memstats_heap_inuse_bytes"])
	reqs, err := h.cp.audit.between(t0, time.Now())
	if err != nil {
		return res, err
	}
	res.requests = summarise(reqs, n)
	return res, nil
}
