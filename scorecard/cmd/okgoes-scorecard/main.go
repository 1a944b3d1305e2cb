// Command okgoes-scorecard runs one of the okgoes operator's custom scorecard tests:
//
//	okgoes-scorecard [flags] <test-name> [flags]
//
// It reads the bundle (default /bundle, where scorecard unpacks it in the test pod), talks to the
// cluster of --kubeconfig, $KUBECONFIG or the pod's service account, works in
// $SCORECARD_NAMESPACE, and prints one scorecard v1alpha3 TestStatus as JSON on stdout. It exits 0
// whenever the test ran: the result's state (pass, fail, error) is the outcome. Wrong usage
// prints an error-state TestStatus too and exits 2.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	scapi "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/okgoes/okgoes-operator/scorecard/internal/bundle"
	"github.com/okgoes/okgoes-operator/scorecard/internal/checks"
)

func main() {
	// Scorecard reads the pod's whole log as the TestStatus: nothing else may be written to it.
	klog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type options struct {
	bundle, kubeconfig, namespace string
	timeout                       time.Duration
	list                          bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("okgoes-scorecard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.bundle, "bundle", "/bundle", "directory of the unpacked bundle (manifests/ below it)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, else the pod's service account, else ~/.kube/config)")
	fs.StringVar(&o.namespace, "namespace", os.Getenv("SCORECARD_NAMESPACE"), "namespace the cluster tests work in (default $SCORECARD_NAMESPACE)")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "bound of each wait of a cluster test (objects reconciled, objects gone)")
	fs.BoolVar(&o.list, "list", false, "list the tests and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: okgoes-scorecard [flags] <test-name>\n\ntests:\n")
		for _, t := range checks.Tests {
			fmt.Fprintf(fs.Output(), "  %-26s %s\n", t.Name, t.Description)
		}
		fmt.Fprintf(fs.Output(), "\nflags:\n")
		fs.PrintDefaults()
	}
	// Flags may come before or after the test name.
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		names = append(names, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if o.list {
		for _, t := range checks.Tests {
			fmt.Fprintf(stdout, "%s\t%s\n", t.Name, t.Description)
		}
		return 0
	}
	if len(names) != 1 || checks.Find(names[0]) == nil {
		msg := fmt.Sprintf("want exactly one test name, got %q; valid tests: %s", names, strings.Join(checks.Names(), ", "))
		print(stdout, errorResult(strings.Join(names, " "), msg))
		return 2
	}
	test := checks.Find(names[0])
	print(stdout, runTest(ctx, test, o))
	return 0
}

func runTest(ctx context.Context, test *checks.Test, o options) scapi.TestResult {
	b, err := bundle.Load(o.bundle)
	if err != nil {
		return errorResult(test.Name, err.Error())
	}
	env := &checks.Env{Bundle: b, Namespace: o.namespace, Timeout: o.timeout}
	if test.Cluster {
		cfg, err := restConfig(o.kubeconfig)
		if err != nil {
			return errorResult(test.Name, "no cluster to talk to: "+err.Error())
		}
		if env.Client, err = dynamic.NewForConfig(cfg); err != nil {
			return errorResult(test.Name, err.Error())
		}
	}
	return test.Run(ctx, env)
}

// restConfig: --kubeconfig; else $KUBECONFIG; else the pod's service account; else
// ~/.kube/config.
func restConfig(path string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case path != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	case os.Getenv("KUBECONFIG") == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		cfg, err = rest.InClusterConfig()
	default:
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	}
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "okgoes-scorecard"
	cfg.QPS, cfg.Burst = 50, 100
	// API warnings would go to stderr, which is part of the pod log scorecard parses.
	cfg.WarningHandler = rest.NoWarnings{}
	return cfg, nil
}

func errorResult(name, msg string) scapi.TestResult {
	return scapi.TestResult{Name: name, State: scapi.ErrorState, Errors: []string{msg}, Suggestions: []string{}}
}

func print(w io.Writer, r scapi.TestResult) {
	out, err := json.MarshalIndent(checks.Status(r), "", "    ")
	if err != nil {
		panic(err) // a TestStatus always marshals
	}
	fmt.Fprintf(w, "%s\n", out)
}
