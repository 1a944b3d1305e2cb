package cache

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cachev1alpha1 "github.com/okgoes/okgoes-operator/api/cache/v1alpha1"
	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagetest"
	"github.com/okgoes/okgoes-operator/internal/redisadmin"
	"github.com/okgoes/okgoes-operator/internal/testenv"
)

// redisPorts maps "namespace/pod" to the port of the local redis-server playing that pod's
// container (replication stories); every such server listens on 127.0.0.1.
var redisPorts sync.Map

// testPodAddress is the PodAddress of the suite: a pod played by a local redis-server is reached
// on 127.0.0.1 at its port, as are the addresses the operator hands to REPLICAOF.
func testPodAddress(pod *corev1.Pod, port int32) (string, int32) {
	if p, ok := redisPorts.Load(pod.Namespace + "/" + pod.Name); ok {
		return "127.0.0.1", p.(int32)
	}
	return pod.Status.PodIP, port
}

// The story tests share one real API server and one running manager; envtest runs no other
// controllers, so the tests play the Deployment controller by writing Deployment status.
var (
	k8s      client.Client // direct, uncached client for the test's own reads and writes
	mgr      manager.Manager
	testCtx  context.Context
	scheme   = runtime.NewScheme()
	suiteErr error
	// reconciles counts the running manager's reconciles per RedisCache.
	reconciles testenv.ReconcileCounter
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapLevel())))
	must := func(err error) {
		if err != nil {
			fmt.Fprintln(os.Stderr, "test suite setup:", err)
			os.Exit(1)
		}
	}
	must(clientgoscheme.AddToScheme(scheme))
	must(cachev1alpha1.AddToScheme(scheme))
	must(cachev1beta1.AddToScheme(scheme))
	// The backup stories (backup_story_test.go) drive PVCBackups and PVCRestores as the storage
	// stories do (storagetest, on this suite's API server).
	must(storagev1.AddToScheme(scheme))
	must(snapshotv1.AddToScheme(scheme))
	// Both versions in the scheme: envtest points the CRD's conversion webhook at the manager's
	// webhook server below, so RedisCaches are stored as v1alpha1 and served as v1beta1 through
	// the real conversion path, as in a cluster.
	env, cfg, err := testenv.Start(scheme)
	must(err)
	defer func() { _ = env.Stop() }()

	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	must(err)
	storagetest.Cfg, storagetest.K8s = cfg, k8s
	mgr, err = ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          testenv.WebhookServer(env),
		// As main.go: only the operator's own children, without managedFields.
		Cache: cache.Options{ByObject: CachedObjects(), DefaultTransform: cache.TransformStripManagedFields()},
	})
	must(err)
	must(SetupConversionWebhook(mgr))
	must((&RedisCacheReconciler{
		Client:             mgr.GetClient(),
		APIReader:          mgr.GetAPIReader(),
		Recorder:           mgr.GetEventRecorderFor("rediscache-controller"), //nolint:staticcheck // core/v1 Events: the events.k8s.io API trips the OLM deprecated-API validator
		SecretPollInterval: time.Second,
		Redis:              redisadmin.Client{Timeout: 500 * time.Millisecond},
		PodAddress:         testPodAddress,
	}).SetupWithManager(mgr, Options{MaxConcurrentReconciles: 4, Wrap: reconciles.Wrap}))

	ctx, cancel := context.WithCancel(context.Background())
	testCtx = ctx
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		code = 1
	}
	return code
}

func zapLevel() zapcore.Level {
	if os.Getenv("TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.WarnLevel
}

// eventually polls cond until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(testCtx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("condition not met within %s: %v", timeout, last)
	}
}
