// Command okgoes-operator is the manager of the okgoes operator: it runs the RedisCache and
// PVCBackup controllers with leader election, health probes and a secured metrics endpoint. The
// same binary is the backup mover (`manager mover backup`) that runs in the backup Jobs.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"

	cachev1alpha1 "github.com/okgoes/okgoes-operator/api/cache/v1alpha1"
	storagev1 "github.com/okgoes/okgoes-operator/api/storage/v1"
	cachecontrollers "github.com/okgoes/okgoes-operator/controllers/cache"
	storagecontrollers "github.com/okgoes/okgoes-operator/controllers/storage"
	"github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/schedule"
)

var scheme = runtime.NewScheme()

// version is set at build time (-ldflags "-X main.version=...") and recorded in backup manifests.
var version = "dev"

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cachev1alpha1.AddToScheme(scheme))
	utilruntime.Must(storagev1.AddToScheme(scheme))
	utilruntime.Must(snapshotv1.AddToScheme(scheme))
}

// config is what the command line sets.
type config struct {
	metricsAddr, probeAddr, leaderNamespace string
	secureMetrics, enableHTTP2, leaderElect bool
	maxConcurrent                           int
	moverImage                              string
	zap                                     zap.Options
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
	fs.BoolVar(&c.leaderElect, "leader-elect", false, "Elect a leader so that only one manager replica reconciles.")
	fs.StringVar(&c.leaderNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease "+
		"(default: the namespace the manager runs in).")
	fs.IntVar(&c.maxConcurrent, "max-concurrent-reconciles", 4, "Objects reconciled at once, per controller.")
	fs.StringVar(&c.moverImage, "mover-image", os.Getenv("RELATED_IMAGE_MOVER"), "Image of the backup mover Jobs: "+
		"the operator's own image (default $RELATED_IMAGE_MOVER, set by the deployment manifests).")
	c.zap.BindFlags(fs)
	return c, fs.Parse(args)
}

func main() {
	// `manager mover backup|restore` is the program of the backup and restore Jobs: the same
	// image, another role.
	if len(os.Args) > 2 && os.Args[1] == "mover" {
		os.Exit(runMover(os.Args[2]))
	}
	c, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
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

func runMover(command string) int {
	var res mover.Result
	switch command {
	case "backup":
		res = mover.RunBackup(context.Background(), os.Getenv, version)
	case "restore":
		res = mover.RunRestore(context.Background(), os.Getenv)
	case "verify":
		res = mover.RunVerify(context.Background(), os.Getenv)
	default:
		fmt.Fprintf(os.Stderr, "mover: unknown command %q (backup, restore, verify)\n", command)
		return 2
	}
	if res.Result != "Succeeded" {
		fmt.Fprintln(os.Stderr, "mover:", res.Message)
		return 1
	}
	return 0
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
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        c.probeAddr,
		LeaderElection:                c.leaderElect,
		LeaderElectionID:              "okgoes-operator.okgoes.com",
		LeaderElectionNamespace:       c.leaderNamespace,
		LeaderElectionReleaseOnCancel: true,
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
	snapshots, err := storagecontrollers.SnapshotAPIServed(mgr)
	if err != nil {
		return nil, fmt.Errorf("discover the VolumeSnapshot API: %w", err)
	}
	if c.moverImage == "" {
		return nil, fmt.Errorf("--mover-image (or $RELATED_IMAGE_MOVER) is required: the image of the backup Jobs")
	}
	deps := func(name string) storagecontrollers.Deps {
		return storagecontrollers.Deps{
			APIReader:  mgr.GetAPIReader(),
			Recorder:   mgr.GetEventRecorderFor(name), //nolint:staticcheck // core/v1 Events: the events.k8s.io API trips the OLM deprecated-API validator
			Clock:      schedule.RealClock{},
			Stores:     storagecontrollers.MinioStores,
			MoverImage: c.moverImage,
		}
	}
	if err := (&storagecontrollers.PVCBackupReconciler{
		Client:             mgr.GetClient(),
		Deps:               deps("pvcbackup-controller"),
		SnapshotsAvailable: snapshots,
	}).SetupWithManager(mgr, storagecontrollers.Options{MaxConcurrentReconciles: c.maxConcurrent}); err != nil {
		return nil, fmt.Errorf("set up the PVCBackup controller: %w", err)
	}
	if err := (&storagecontrollers.PVCRestoreReconciler{
		Client: mgr.GetClient(),
		Deps:   deps("pvcrestore-controller"),
	}).SetupWithManager(mgr, storagecontrollers.Options{MaxConcurrentReconciles: c.maxConcurrent}); err != nil {
		return nil, fmt.Errorf("set up the PVCRestore controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}
