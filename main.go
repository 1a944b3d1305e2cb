// Command okgoes-operator is the manager of the okgoes operator: it runs the RedisCache controller
// (and, as they land, the storage controllers) with leader election, health probes and a
// secured metrics endpoint.
package main

import (
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

	cachev1alpha1 "github.com/okgoes/okgoes-operator/api/cache/v1alpha1"
	cachecontrollers "github.com/okgoes/okgoes-operator/controllers/cache"
)

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cachev1alpha1.AddToScheme(scheme))
}

// config is what the command line sets.
type config struct {
	metricsAddr, probeAddr, leaderNamespace string
	secureMetrics, enableHTTP2, leaderElect bool
	maxConcurrent                           int
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
	c.zap.BindFlags(fs)
	return c, fs.Parse(args)
}

func main() {
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
		Recorder:  mgr.GetEventRecorder("rediscache-controller"),
	}).SetupWithManager(mgr, cachecontrollers.Options{MaxConcurrentReconciles: c.maxConcurrent}); err != nil {
		return nil, fmt.Errorf("set up the RedisCache controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}
