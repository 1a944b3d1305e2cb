package webhookcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/okgoes/okgoes-operator/internal/testenv"
)

var k8s client.Client

func TestMain(m *testing.M) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	env, cfg, err := testenv.StartEmpty(scheme)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func options(t *testing.T, now time.Time) Options {
	return Options{Namespace: "default", SecretName: "cert-" + fmt.Sprint(time.Now().UnixNano()), ServiceName: "okgoes-webhook",
		CertDir: t.TempDir(), Now: func() time.Time { return now }}
}

func getSecret(t *testing.T, o Options) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: o.Namespace, Name: o.SecretName}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestEnsureCreatesReusesAndRenews(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	o := options(t, now)
	ca, err := Ensure(ctx, k8s, o)
	if err != nil {
		t.Fatal(err)
	}
	first := getSecret(t, o)
	if first.Type != corev1.SecretTypeTLS || !bytes.Equal(first.Data[KeyCA], ca) {
		t.Fatalf("Secret type %s, CA returned matches Secret: %v", first.Type, bytes.Equal(first.Data[KeyCA], ca))
	}
	for _, k := range []string{KeyCert, KeyKey} {
		onDisk, err := os.ReadFile(filepath.Join(o.CertDir, k))
		if err != nil || !bytes.Equal(onDisk, first.Data[k]) {
			t.Fatalf("%s on disk differs from the Secret (%v)", k, err)
		}
	}

	// A restart within the validity reuses the certificate: nothing is written.
	o2 := o
	o2.CertDir = t.TempDir()
	if ca2, err := Ensure(ctx, k8s, o2); err != nil || !bytes.Equal(ca2, ca) {
		t.Fatalf("second Ensure: err %v, same CA %v", err, bytes.Equal(ca2, ca))
	}
	if rv := getSecret(t, o).ResourceVersion; rv != first.ResourceVersion {
		t.Fatalf("a valid certificate was rewritten (resourceVersion %s -> %s)", first.ResourceVersion, rv)
	}

	// Inside the renewal window a new one is made.
	o3 := o
	o3.Now = func() time.Time { return now.Add(Validity - RenewBefore + time.Hour) }
	ca3, err := Ensure(ctx, k8s, o3)
	if err != nil || bytes.Equal(ca3, ca) {
		t.Fatalf("renewal: err %v, CA changed %v", err, !bytes.Equal(ca3, ca))
	}

	// A Service name that is not in the certificate also makes a new one.
	o4 := o3
	o4.ServiceName = "renamed"
	if ca4, err := Ensure(ctx, k8s, o4); err != nil || bytes.Equal(ca4, ca3) {
		t.Fatalf("new service name: err %v, CA changed %v", err, !bytes.Equal(ca4, ca3))
	}

	// Garbage in the Secret is replaced, not trusted.
	s := getSecret(t, o)
	s.Data[KeyKey] = []byte("not a key")
	if err := k8s.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(ctx, k8s, o4); err != nil {
		t.Fatal(err)
	}
	if !usable(getSecret(t, o).Data, o4.DNSNames(), o4.now()) {
		t.Fatal("the broken Secret was not repaired")
	}
}

func TestServedCertificateVerifiesWithTheCA(t *testing.T) {
	o := options(t, time.Now())
	ca, err := Ensure(context.Background(), k8s, o)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(o.CertDir, KeyCert), filepath.Join(o.CertDir, KeyKey))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	dial := func(serverName string) error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", l.Addr().String(),
			&tls.Config{RootCAs: pool, ServerName: serverName})
		if err == nil {
			conn.Close()
		}
		return err
	}
	// The API server reaches a Service-backed webhook as <service>.<namespace>.svc.
	if err := dial("okgoes-webhook.default.svc"); err != nil {
		t.Fatalf("TLS handshake as the API server would do it: %v", err)
	}
	if err := dial("someone-else.default.svc"); err == nil {
		t.Fatal("the certificate verified for a name it was not made for")
	}
}

func TestInjectorKeepsTheCABundle(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	crd := convertibleCRD()
	if err := k8s.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	ca, err := Generate([]string{"x"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := InjectCABundle(ctx, k8s, crd.Name, ca[KeyCA], ""); err != nil || !changed {
		t.Fatalf("first injection: changed %v, err %v", changed, err)
	}
	if changed, err := InjectCABundle(ctx, k8s, crd.Name, ca[KeyCA], ""); err != nil || changed {
		t.Fatalf("second injection: changed %v (want false), err %v", changed, err)
	}

	// `kubectl apply` of the CRD manifest resets the caBundle; the injector puts it back.
	inj := &Injector{Client: k8s, CRDs: []string{crd.Name}, CA: ca[KeyCA], Interval: 100 * time.Millisecond}
	go func() { _ = inj.Start(ctx) }()
	got := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: crd.Name}}
	reset := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"conversion":{"webhook":{"clientConfig":{"caBundle":null}}}}}`))
	if err := k8s.Patch(ctx, got, reset); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Conversion.Webhook.ClientConfig.CABundle) != 0 {
		t.Fatal("the reset did not clear the caBundle")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := k8s.Get(ctx, types.NamespacedName{Name: crd.Name}, got); err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(got.Spec.Conversion.Webhook.ClientConfig.CABundle, ca[KeyCA]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the injector did not restore the caBundle")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A CRD without a conversion webhook is an error, not a silent success.
	plain := convertibleCRD()
	plain.Name, plain.Spec.Names.Plural, plain.Spec.Names.Kind, plain.Spec.Names.ListKind, plain.Spec.Names.Singular =
		"others.test.okgoes.com", "others", "Other", "OtherList", "other"
	plain.Spec.Versions = plain.Spec.Versions[:1]
	plain.Spec.Conversion = nil
	if err := k8s.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if _, err := InjectCABundle(ctx, k8s, plain.Name, ca[KeyCA], ""); err == nil {
		t.Fatal("InjectCABundle succeeded on a CRD without a conversion webhook")
	}
}

func convertibleCRD() *apiextensionsv1.CustomResourceDefinition {
	schema := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object", XPreserveUnknownFields: new(true)}}
	url := "https://127.0.0.1:1/convert"
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "things.test.okgoes.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "test.okgoes.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "things", Singular: "thing", Kind: "Thing", ListKind: "ThingList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: schema},
				{Name: "v2", Served: true, Schema: schema},
			},
			Conversion: &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ConversionReviewVersions: []string{"v1"},
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url},
				},
			},
		},
	}
}
