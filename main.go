// Command okgoes-operator is the manager of the okgoes operator: it runs the RedisCache and
// PVCBackup controllers with leader election, health probes and a secured metrics endpoint. The
// backup Jobs run the mover, cmd/mover, the other program of the operator's image.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	groupsnapshotv1beta2 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1beta2"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"

	cachev1alpha1 "github.com/okgoes/okgoes-operator/api/cache/v1alpha1"
	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	cachecontrollers "github.com/okgoes/okgoes-operator/controllers/cache"
	"github.com/okgoes/okgoes-operator/controllers/storage/backupcatalog"
	"github.com/okgoes/okgoes-operator/controllers/storage/pvcbackup"
	"github.com/okgoes/okgoes-operator/controllers/storage/pvcrestore"
	"github.com/okgoes/okgoes-operator/controllers/storage/storagekit"
	"github.com/okgoes/okgoes-operator/internal/schedule"
	"github.com/okgoes/okgoes-operator/internal/storageversion"
	"github.com/okgoes/okgoes-operator/internal/webhookcert"
)

var scheme = runtime.NewScheme()

// version is set at build time (-ldflags "-X main.version=...") and recorded in backup manifests.
var version = "dev"

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cachev1alpha1.AddToScheme(scheme))
	utilruntime.Must(cachev1beta1.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(storagev1.AddToScheme(scheme))
	utilruntime.Must(snapshotv1.AddToScheme(scheme))
	utilruntime.Must(groupsnapshotv1beta2.AddToScheme(scheme))
}

// config is what the command line sets.
type config struct {
	metricsAddr, probeAddr, pprofAddr, leaderNamespace string
	secureMetrics, enableHTTP2, leaderElect            bool
	maxConcurrent                                      int
	moverImage                                         string
	webhook                                            webhookConfig
	zap                                                zap.Options
	// inTest lets tests run several managers in one process (controller names are global).
	inTest bool
}

// webhookConfig is where the conversion webhook listens and where its certificate comes from.
type webhookConfig struct {
	port        int
	certDir     string
	certs       string // "external" (OLM, cert-manager) or "self-signed"
	serviceName string // self-signed: the Service the certificate is for
	secretName  string // self-signed: the Secret it is kept in
	url         string // self-signed: a URL instead of the Service (manager outside the cluster)
}

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	var c config
	fs.StringVar(&c.metricsAddr, "metrics-bind-address", "0", "Address the metrics endpoint binds to "+
		"(e.g. :8443 for HTTPS, :8080 for HTTP); 0 disables it.")
	fs.BoolVar(&c.secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS with authentication "+
		"and authorization by the API server (TokenReview/SubjectAccessReview).")
	fs.BoolVar(&c.enableHTTP2, "enable-http2", false, "Enable HTTP/2 for the metrics server "+
		"(off by default: HTTP/2 Stream Cancellation and Rapid Reset CVEs).")
	fs.StringVar(&c.probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	fs.StringVar(&c.pprofAddr, "pprof-bind-address", "0", "Address Go's pprof endpoints bind to (unauthenticated: "+
		"for profiling on a test cluster, e.g. 127.0.0.1:6060); 0 disables them.")
	fs.BoolVar(&c.leaderElect, "leader-elect", false, "Elect a leader so that only one manager replica reconciles.")
	fs.StringVar(&c.leaderNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease "+
		"(default: the namespace the manager runs in).")
	fs.IntVar(&c.maxConcurrent, "max-concurrent-reconciles", 16, "Objects reconciled at once, per controller "+
		"(reconciles mostly wait on the API server: 16 start 300 backups due the same minute 1.6 × faster than 4, docs/benchmarks.md).")
	fs.StringVar(&c.moverImage, "mover-image", os.Getenv("RELATED_IMAGE_MOVER"), "Image of the backup mover Jobs: "+
		"the operator's own image (default $RELATED_IMAGE_MOVER, set by the deployment manifests).")
	fs.IntVar(&c.webhook.port, "webhook-port", 9443, "Port of the conversion webhook (HTTPS).")
	fs.StringVar(&c.webhook.certDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs",
		"Directory holding the webhook's tls.crt and tls.key (OLM mounts them here).")
	fs.StringVar(&c.webhook.certs, "webhook-certs", envOr("WEBHOOK_CERTS", "external"), "Where the webhook certificate comes from: "+
		"external (OLM or cert-manager provide the files and the CRD caBundle) or self-signed (the manager "+
		"keeps a CA and certificate in a Secret and the CA in the CRD caBundle; used by `make deploy`). "+
		"Default $WEBHOOK_CERTS, else external.")
	fs.StringVar(&c.webhook.serviceName, "webhook-service-name", "okgoes-operator-webhook-service",
		"With --webhook-certs=self-signed: the Service in front of the webhook.")
	fs.StringVar(&c.webhook.secretName, "webhook-secret-name", "okgoes-operator-webhook-server-cert",
		"With --webhook-certs=self-signed: the Secret holding the CA and certificate.")
	fs.StringVar(&c.webhook.url, "webhook-url", "", "With --webhook-certs=self-signed: point the CRDs at this "+
		"URL instead of the Service (a manager running outside the cluster, as `make run` does).")
	c.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.webhook.certs != "external" && c.webhook.certs != "self-signed" {
		return c, fmt.Errorf("--webhook-certs=%q: want external or self-signed", c.webhook.certs)
	}
	return c, nil
}

func main() {
	c, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		// flag reports its own parse errors; this is a value it parsed but the manager refuses.
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&c.zap)))
	setupLog := ctrl.Log.WithName("setup")
	mgr, err := newManager(ctrl.GetConfigOrDie(), c)
	if err != nil {
		setupLog.Error(err, "unable to set up the manager")
		os.Exit(1)
	}
	setupLog.Info("starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "manager exited with an error")
		os.Exit(1)
	}
}

// newManager builds the manager with every controller, probe and the metrics endpoint.
func newManager(restConfig *rest.Config, c config) (ctrl.Manager, error) {
	var tlsOpts []func(*tls.Config)
	if !c.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(t *tls.Config) { t.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{BindAddress: c.metricsAddr, SecureServing: c.secureMetrics, TLSOpts: tlsOpts}
	if c.secureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	// Uncached: RBAC lets the manager read its own CRDs by name, not list or watch all CRDs.
	direct, err := client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	injector, err := provisionWebhookCerts(direct, c.webhook)
	if err != nil {
		return nil, err
	}
	outages := &storagekit.APIOutages{}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme: scheme,
		WebhookServer: webhook.NewServer(webhook.Options{
			Port: c.webhook.port, CertDir: c.webhook.certDir, TLSOpts: tlsOpts,
		}),
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        c.probeAddr,
		PprofBindAddress:              c.pprofAddr,
		LeaderElection:                c.leaderElect,
		LeaderElectionID:              "okgoes-operator.okgoes.com",
		LeaderElectionNamespace:       c.leaderNamespace,
		LeaderElectionReleaseOnCancel: true,
		Controller:                    ctrlconfig.Controller{SkipNameValidation: &c.inTest},
		Cache:                         cacheOptions(outages),
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	if err := (&cachecontrollers.RedisCacheReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorderFor("rediscache-controller"), //nolint:staticcheck // core/v1 Events: the events.k8s.io API trips the OLM deprecated-API validator
	}).SetupWithManager(mgr, cachecontrollers.Options{MaxConcurrentReconciles: c.maxConcurrent}); err != nil {
		return nil, fmt.Errorf("set up the RedisCache controller: %w", err)
	}
	if err := cachecontrollers.SetupConversionWebhook(mgr); err != nil {
		return nil, fmt.Errorf("set up the conversion webhook: %w", err)
	}
	if err := mgr.Add(&storageversion.Runnable{Client: direct, CRDs: webhookCRDs}); err != nil {
		return nil, err
	}
	if injector != nil {
		if err := mgr.Add(injector); err != nil {
			return nil, err
		}
	}
	snapshots, err := pvcbackup.SnapshotAPIServed(mgr)
	if err != nil {
		return nil, fmt.Errorf("discover the VolumeSnapshot API: %w", err)
	}
	if c.moverImage == "" {
		return nil, fmt.Errorf("--mover-image (or $RELATED_IMAGE_MOVER) is required: the image of the backup Jobs")
	}
	// One cache for the storage controllers: PVCBackups, PVCRestores and BackupCatalogs share
	// Secrets and buckets.
	s3Cache := &storagekit.S3Cache{TTL: storagekit.DefaultPollInterval}
	deps := func(name string) storagekit.Deps {
		return storagekit.Deps{
			APIReader:  mgr.GetAPIReader(),
			Recorder:   mgr.GetEventRecorderFor(name), //nolint:staticcheck // core/v1 Events: the events.k8s.io API trips the OLM deprecated-API validator
			Clock:      schedule.RealClock{},
			Stores:     storagekit.MinioStores,
			MoverImage: c.moverImage,
			S3Cache:    s3Cache,
			Outages:    outages,
		}
	}
	if err := (&pvcbackup.PVCBackupReconciler{
		Client:             mgr.GetClient(),
		Deps:               deps("pvcbackup-controller"),
		SnapshotsAvailable: snapshots,
		SnapshotAPIProbe:   func(context.Context) (bool, error) { return pvcbackup.SnapshotAPIServed(mgr) },
		PodExec:            pvcbackup.NewPodExecutor(mgr.GetConfig()), // spec.hooks
	}).SetupWithManager(mgr, storagekit.Options{MaxConcurrentReconciles: c.maxConcurrent}); err != nil {
		return nil, fmt.Errorf("set up the PVCBackup controller: %w", err)
	}
	if err := (&pvcrestore.PVCRestoreReconciler{
		Client: mgr.GetClient(),
		Deps:   deps("pvcrestore-controller"),
	}).SetupWithManager(mgr, storagekit.Options{MaxConcurrentReconciles: c.maxConcurrent}); err != nil {
		return nil, fmt.Errorf("set up the PVCRestore controller: %w", err)
	}
	if err := (&backupcatalog.BackupCatalogReconciler{
		Client: mgr.GetClient(),
		Deps:   deps("backupcatalog-controller"),
	}).SetupWithManager(mgr, storagekit.Options{MaxConcurrentReconciles: c.maxConcurrent}); err != nil {
		return nil, fmt.Errorf("set up the BackupCatalog controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	// Ready once the webhook serves: the API server sends conversions to ready pods only.
	if err := mgr.AddReadyzCheck("readyz", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return nil, err
	}
	return mgr, nil
}

// cacheOptions keep the manager's memory proportional to the operator's objects, not to the
// cluster: informers of owned kinds hold only objects labelled as the operator's, and no cached
// object keeps its managedFields (often half of its size; the controllers never read them).
func cacheOptions(outages *storagekit.APIOutages) cache.Options {
	byObject := cachecontrollers.CachedObjects()
	for obj, opts := range storagekit.CachedObjects() {
		byObject[obj] = opts
	}
	// A broken watch tells the storage controllers that the cache may lag the API server after
	// an outage (controllers/storage/storagekit/apioutage.go).
	return cache.Options{ByObject: byObject, DefaultTransform: cache.TransformStripManagedFields(),
		DefaultWatchErrorHandler: outages.WatchErrorHandler}
}

// webhookCRDs are the CRDs whose conversion webhook the manager serves. The manager may read and
// patch these CRDs only: their caBundle (self-signed certificates) and their storedVersions
// (internal/storageversion), granted by the markers below.
var webhookCRDs = []string{"rediscaches.cache.okgoes.com"}

// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=rediscaches.cache.okgoes.com,verbs=get
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions/status,resourceNames=rediscaches.cache.okgoes.com,verbs=get;patch
// The storage version migration rewrites every RedisCache unchanged, so that it is stored at the
// new storage version, before it trims storedVersions:
// +kubebuilder:rbac:groups=cache.okgoes.com,resources=rediscaches,verbs=update

// provisionWebhookCerts, with --webhook-certs=self-signed, makes sure the webhook certificate
// exists (in its Secret and in the cert dir) before the webhook server starts, and returns the
// runnable that keeps the CA in the CRDs' caBundle. With external certificates it does nothing.
func provisionWebhookCerts(direct client.Client, w webhookConfig) (*webhookcert.Injector, error) {
	if w.certs != "self-signed" {
		return nil, nil
	}
	ns, err := podNamespace()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ca, err := webhookcert.Ensure(ctx, direct, webhookcert.Options{
		Namespace: ns, SecretName: w.secretName, ServiceName: w.serviceName, CertDir: w.certDir, URL: w.url,
	})
	if err != nil {
		return nil, fmt.Errorf("webhook certificate: %w", err)
	}
	return &webhookcert.Injector{Client: direct, CRDs: webhookCRDs, CA: ca, URL: w.url, Interval: 30 * time.Second}, nil
}

// podNamespace is the namespace the manager runs in: $POD_NAMESPACE (downward API), else the
// service account's namespace file.
func podNamespace() (string, error) {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns, nil
	}
	data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return "", fmt.Errorf("namespace of the manager unknown: set POD_NAMESPACE: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
