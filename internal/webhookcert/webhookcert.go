// Package webhookcert gives the conversion webhook a serving certificate when nothing else does:
// under `make deploy` (no OLM, no cert-manager) the manager keeps a self-signed CA and serving
// certificate in a Secret, writes them where the webhook server reads them, and keeps the CA in
// the caBundle of the CRDs that call the webhook. Under OLM none of this runs: OLM mounts the
// certificate and injects the caBundle itself.
package webhookcert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Validity of a generated serving certificate, and how long before its end a new one is made.
// Rotation happens when a manager starts; docs/install.md says to restart the manager yearly if
// it never restarts on its own.
const (
	Validity    = 365 * 24 * time.Hour
	RenewBefore = 90 * 24 * time.Hour
)

// Secret keys, as in a kubernetes.io/tls Secret plus the CA.
const (
	KeyCA   = "ca.crt"
	KeyCert = corev1.TLSCertKey
	KeyKey  = corev1.TLSPrivateKeyKey
)

// Options say where the certificate lives and for which Service it is.
type Options struct {
	Namespace   string // of the manager, the Secret and the Service
	SecretName  string
	ServiceName string
	CertDir     string // the webhook server's cert dir: tls.crt and tls.key are written here
	// URL, when set, is where the API server reaches the webhook instead of the Service (a
	// manager running outside the cluster, as `make run` does); its host joins the names.
	URL string
	Now func() time.Time
}

// DNSNames are the names the API server may use to reach the Service.
func (o Options) DNSNames() []string {
	s, ns := o.ServiceName, o.Namespace
	names := []string{s, s + "." + ns, s + "." + ns + ".svc", s + "." + ns + ".svc.cluster.local"}
	if u, err := url.Parse(o.URL); err == nil && u.Hostname() != "" {
		names = append(names, u.Hostname())
	}
	return names
}

func (o Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// Ensure makes sure the Secret holds a CA and a serving certificate for the Service that is
// valid for more than RenewBefore, writes the certificate and key into CertDir, and returns the
// CA (PEM). Several replicas may run it at once: the Secret's resourceVersion decides who wins,
// and the losers use the winner's certificate.
func Ensure(ctx context.Context, c client.Client, o Options) ([]byte, error) {
	for range 5 {
		secret := &corev1.Secret{}
		err := c.Get(ctx, types.NamespacedName{Namespace: o.Namespace, Name: o.SecretName}, secret)
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("read Secret %s/%s: %w", o.Namespace, o.SecretName, err)
		}
		exists := err == nil
		if exists && usable(secret.Data, o.DNSNames(), o.now()) {
			return secret.Data[KeyCA], writeFiles(o.CertDir, secret.Data)
		}
		data, err := Generate(o.DNSNames(), o.now())
		if err != nil {
			return nil, err
		}
		if !exists {
			secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.SecretName}, Type: corev1.SecretTypeTLS}
		}
		secret.Data = data
		if exists {
			err = c.Update(ctx, secret)
		} else {
			err = c.Create(ctx, secret)
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			continue // another replica wrote it first: use theirs
		}
		if err != nil {
			return nil, fmt.Errorf("write Secret %s/%s: %w", o.Namespace, o.SecretName, err)
		}
		logf.FromContext(ctx).Info("generated a webhook serving certificate", "secret", o.SecretName, "dnsNames", o.DNSNames())
		return data[KeyCA], writeFiles(o.CertDir, data)
	}
	return nil, fmt.Errorf("Secret %s/%s kept changing while the webhook certificate was written", o.Namespace, o.SecretName)
}

// usable reports whether data holds a CA and a serving certificate signed by it, for every name
// in dnsNames, valid for more than RenewBefore from now.
func usable(data map[string][]byte, dnsNames []string, now time.Time) bool {
	pair, err := parsePair(data[KeyCert], data[KeyKey])
	if err != nil {
		return false
	}
	ca, err := parseCert(data[KeyCA])
	if err != nil {
		return false
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, name := range dnsNames {
		if _, err := pair.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: now.Add(RenewBefore)}); err != nil {
			return false
		}
	}
	return true
}

func parseCert(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// parsePair parses a certificate and checks the key belongs to it.
func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM key")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("the key does not belong to the certificate")
	}
	return cert, nil
}

// Generate makes a new CA and a serving certificate for dnsNames signed by it, as Secret data.
func Generate(dnsNames []string, now time.Time) (map[string][]byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	notBefore := now.Add(-time.Hour) // tolerate clock skew between nodes
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "okgoes-operator webhook CA"},
		NotBefore:             notBefore,
		NotAfter:              now.Add(Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		DNSNames:     dnsNames,
		NotBefore:    notBefore,
		NotAfter:     now.Add(Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		KeyCA:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		KeyCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyKey:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// writeFiles writes tls.crt and tls.key into dir (the webhook server watches them).
func writeFiles(dir string, data map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, k := range []string{KeyCert, KeyKey} {
		if err := os.WriteFile(filepath.Join(dir, k), data[k], 0o600); err != nil {
			return err
		}
	}
	return nil
}

// InjectCABundle sets caBundle of the CRD's conversion webhook to ca, if it is not already. With
// an empty url it changes nothing else (the rest of the conversion stanza comes from the CRD
// manifest); with a url it points the conversion webhook there.
func InjectCABundle(ctx context.Context, c client.Client, crdName string, ca []byte, url string) (changed bool, err error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, types.NamespacedName{Name: crdName}, crd); err != nil {
		return false, fmt.Errorf("read CRD %s: %w", crdName, err)
	}
	if url != "" {
		return setURL(ctx, c, crd, ca, url)
	}
	conv := crd.Spec.Conversion
	if conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter || conv.Webhook == nil || conv.Webhook.ClientConfig == nil {
		return false, fmt.Errorf("CRD %s has no conversion webhook to give a caBundle to", crdName)
	}
	if bytes.Equal(conv.Webhook.ClientConfig.CABundle, ca) {
		return false, nil
	}
	base := crd.DeepCopy()
	conv.Webhook.ClientConfig.CABundle = ca
	if err := c.Patch(ctx, crd, client.MergeFrom(base)); err != nil {
		return false, fmt.Errorf("set the caBundle of CRD %s: %w", crdName, err)
	}
	return true, nil
}

func setURL(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition, ca []byte, url string) (bool, error) {
	want := &apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{
			ConversionReviewVersions: []string{"v1"},
			ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: ca},
		},
	}
	if equality.Semantic.DeepEqual(crd.Spec.Conversion, want) {
		return false, nil
	}
	base := crd.DeepCopy()
	crd.Spec.Conversion = want
	if err := c.Patch(ctx, crd, client.MergeFrom(base)); err != nil {
		return false, fmt.Errorf("point the conversion webhook of CRD %s at %s: %w", crd.Name, url, err)
	}
	return true, nil
}

// Injector keeps the caBundle of CRDs equal to CA: `kubectl apply` of the CRD manifests (an
// upgrade with make deploy) resets it, and conversion would fail until it is set again.
// Every replica runs it (it needs no leadership: all write the same value).
type Injector struct {
	Client   client.Client
	CRDs     []string
	CA       []byte
	URL      string // see Options.URL
	Interval time.Duration
}

// NeedLeaderElection is false: a replica that is not the leader still serves conversions.
func (*Injector) NeedLeaderElection() bool { return false }

// Start injects now and then every Interval until ctx ends.
func (i *Injector) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("webhookcert")
	t := time.NewTicker(i.Interval)
	defer t.Stop()
	for {
		for _, name := range slices.Sorted(slices.Values(i.CRDs)) {
			changed, err := InjectCABundle(ctx, i.Client, name, i.CA, i.URL)
			if err != nil {
				log.Error(err, "caBundle not set; conversions fail until it is", "crd", name)
			} else if changed {
				log.Info("set the conversion webhook caBundle", "crd", name)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
