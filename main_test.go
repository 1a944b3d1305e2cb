package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "github.com/okgoes/okgoes-operator/api/cache/v1alpha1"
	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
	"github.com/okgoes/okgoes-operator/internal/testenv"
)

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestManagerServesAuthorizedMetricsAndLeads runs the manager as deployed (secure metrics,
// leader election) against a real API server: the metrics endpoint refuses anonymous and
// unauthorized scrapes, serves an identity bound to the metrics-reader role, and the Lease of
// the design's leader election ID is held.
func TestManagerServesAuthorizedMetricsAndLeads(t *testing.T) {
	env, cfg, err := testenv.Start(scheme)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	addr := freePort(t)
	c, err := parseFlags(flag.NewFlagSet("test", flag.ContinueOnError), []string{
		"--metrics-bind-address=" + addr, "--health-probe-bind-address=0",
		"--leader-elect", "--leader-election-namespace=default", "--mover-image=example.org/okgoes-operator:test",
		// The conversion webhook where envtest pointed the CRD, with envtest's certificate.
		fmt.Sprintf("--webhook-port=%d", env.WebhookInstallOptions.LocalServingPort),
		"--webhook-cert-dir=" + env.WebhookInstallOptions.LocalServingCertDir,
	})
	if err != nil {
		t.Fatal(err)
	}
	c.inTest = true
	mgr, err := newManager(cfg, c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{}
	poll(t, func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "okgoes-operator.okgoes.com"}, lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return fmt.Errorf("lease not held")
		}
		return nil
	})

	// ServiceAccount tokens to scrape with, as Prometheus would. Two identities, because the
	// manager caches authorization decisions (a denial for 30s).
	cs := kubernetes.NewForConfigOrDie(cfg)
	token := func(name string) string {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
		if err := k8s.Create(ctx, sa); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	prometheus, stranger := token("prometheus"), token("stranger")
	scrape := func(token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		// The manager serves a self-signed certificate unless one is mounted.
		httpc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		resp, err := httpc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	poll(t, func() error {
		if code, body := scrape(""); code != http.StatusUnauthorized {
			return fmt.Errorf("anonymous scrape: %d %.100s", code, body)
		}
		return nil
	})
	if code, _ := scrape(stranger); code != http.StatusForbidden {
		t.Errorf("scrape by an identity without the metrics-reader role: %d, want 403", code)
	}

	// Bind the reader role the way config/rbac/metrics_reader_role.yaml is meant to be used.
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "prometheus-metrics-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "prometheus"}}}
	for _, o := range []client.Object{role, binding} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// One cache to reconcile, so the queue and our own series have values (the priority queue
	// creates its workqueue_depth series on the first add).
	if err := k8s.Create(ctx, &cachev1alpha1.RedisCache{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "scraped"}}); err != nil {
		t.Fatal(err)
	}
	poll(t, func() error {
		code, body := scrape(prometheus)
		if code != http.StatusOK {
			return fmt.Errorf("authorized scrape: %d", code)
		}
		for _, series := range []string{"controller_runtime_reconcile_total", "workqueue_depth", "leader_election_master_status",
			`okgoes_rediscache_desired_replicas{name="scraped",namespace="default"} 1`} {
			if !strings.Contains(body, series) {
				return fmt.Errorf("metrics lack %s", series)
			}
		}
		return nil
	})
}

func poll(t *testing.T, cond func() error) {
	t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 20*time.Second, true,
		func(context.Context) (bool, error) { last = cond(); return last == nil, nil }); err != nil {
		t.Fatalf("not within 20s: %v", last)
	}
}

// TestSelfSignedWebhookServesConversions runs the manager as `make deploy` does, with
// --webhook-certs=self-signed (here reached by URL, as a manager outside the cluster is): it
// makes its own CA and certificate, keeps them in a Secret, points the CRD at itself with that
// CA, and the API server then converts RedisCaches through it.
func TestSelfSignedWebhookServesConversions(t *testing.T) {
	env, cfg, err := testenv.Start(scheme)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	t.Setenv("POD_NAMESPACE", "default")
	port := freePort(t)[len("127.0.0.1:"):]
	c, err := parseFlags(flag.NewFlagSet("test", flag.ContinueOnError), []string{
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--mover-image=example.org/okgoes-operator:test",
		"--webhook-certs=self-signed", "--webhook-port=" + port, "--webhook-cert-dir=" + t.TempDir(),
		"--webhook-url=https://localhost:" + port + "/convert",
	})
	if err != nil {
		t.Fatal(err)
	}
	c.inTest = true
	mgr, err := newManager(cfg, c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "okgoes-operator-webhook-server-cert"}, secret); err != nil {
		t.Fatalf("the certificate Secret: %v", err)
	}
	poll(t, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: "rediscaches.cache.okgoes.com"}, crd); err != nil {
			return err
		}
		cc := crd.Spec.Conversion.Webhook.ClientConfig
		if cc.URL == nil || !strings.Contains(*cc.URL, ":"+port+"/") || !bytes.Equal(cc.CABundle, secret.Data["ca.crt"]) {
			return fmt.Errorf("CRD conversion not pointed at the manager with its CA")
		}
		return nil
	})
	maxClients := int32(77)
	created := &cachev1beta1.RedisCache{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "converted"},
		Spec: cachev1beta1.RedisCacheSpec{Redis: cachev1beta1.Redis{MaxClients: &maxClients}}}
	poll(t, func() error { return k8s.Create(ctx, created) })
	// v1beta1 is stored as it is: the first read as v1alpha1 is the first conversion, which
	// fails until the webhook server listens (CI once read before it did: connection refused).
	alpha := &cachev1alpha1.RedisCache{}
	poll(t, func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(created), alpha) })
	if got := alpha.Annotations[cachev1alpha1.HubOnlyAnnotation]; got != `{"maxClients":77}` {
		t.Fatalf("v1alpha1 view of a v1beta1 object: annotation %q", got)
	}
	beta := &cachev1beta1.RedisCache{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(created), beta); err != nil {
		t.Fatal(err)
	}
	if beta.Spec.Redis.MaxClients == nil || *beta.Spec.Redis.MaxClients != 77 || beta.Spec.Redis.Port != 6379 {
		t.Fatalf("v1beta1 read back: %+v", beta.Spec.Redis)
	}
}
