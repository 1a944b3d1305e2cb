//go:build e2e

package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// scraper reaches the manager's metrics endpoint (HTTPS :8443, authenticated and authorized by the
// API server) through a port-forward to the manager pod, with the tokens of two ServiceAccounts:
// one bound to the metrics-reader ClusterRole that `make deploy` installs, one bound to nothing.
type scraper struct {
	addr           string
	reader, nobody string // bearer tokens
	http           *http.Client
	stopForward    func()
}

const scraperNS = "okgoes-e2e-metrics"

var (
	scraperOnce sync.Once
	theScraper  *scraper
	scraperErr  error
)

func metricsScraper(t *testing.T) *scraper {
	t.Helper()
	scraperOnce.Do(func() { theScraper, scraperErr = newScraper(t) })
	if scraperErr != nil {
		t.Fatal(scraperErr)
	}
	return theScraper
}

func newScraper(t *testing.T) (*scraper, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scraperNS}}
	if err := k8s.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	for _, name := range []string{"metrics-reader", "nobody"} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: scraperNS, Name: name}}
		if err := k8s.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "okgoes-e2e-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cfg.operatorPrefix + "metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: scraperNS, Name: "metrics-reader"}},
	}
	if err := k8s.Create(ctx, crb); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	token := func(sa string) (string, error) {
		tr, err := clients.CoreV1().ServiceAccounts(scraperNS).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			return "", fmt.Errorf("token of %s: %w", sa, err)
		}
		return tr.Status.Token, nil
	}
	s := &scraper{http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// The manager serves a self-signed certificate; what is under test is who may read.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
	}}}
	var err error
	if s.reader, err = token("metrics-reader"); err != nil {
		return nil, err
	}
	if s.nobody, err = token("nobody"); err != nil {
		return nil, err
	}
	// Shared by the tests that scrape: it lives until cleanupScraper.
	if s.addr, s.stopForward, err = startPortForward(cfg.operatorNS, managerPod(t).Name, 8443); err != nil {
		return nil, err
	}
	return s, nil
}

// cleanupScraper removes what newScraper made (called after all tests).
func cleanupScraper() {
	if theScraper != nil {
		theScraper.stopForward()
	}
	_ = k8s.Delete(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "okgoes-e2e-metrics-reader"}})
	_ = k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scraperNS}})
}

// get fetches /metrics with the token ("" for none) and returns the status code and body.
func (s *scraper) get(token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+s.addr+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// reconciles is the sum of controller_runtime_reconcile_total over all results for controller.
func (s *scraper) reconciles(t *testing.T, controller string) int {
	t.Helper()
	code, body, err := s.get(s.reader)
	if err != nil || code != http.StatusOK {
		t.Fatalf("scrape metrics: %d %v", code, err)
	}
	total, found := 0, false
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "controller_runtime_reconcile_total{") || !strings.Contains(line, `controller="`+controller+`"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		total += int(v)
		found = true
	}
	if !found {
		t.Fatalf("no controller_runtime_reconcile_total series for controller %q", controller)
	}
	return total
}
