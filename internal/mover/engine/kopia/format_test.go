package kopia

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kopia/kopia/repo/compression"
	"github.com/kopia/kopia/repo/splitter"

	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// celValues is the list of the CEL rule `self in [...]` that follows field: in the PVCBackup CRD
// (the API package links no kopia, so its values are checked here against the mover's).
func celValues(t *testing.T, crd, field string) []string {
	t.Helper()
	i := strings.Index(crd, "\n                  "+field+":\n")
	if i < 0 {
		t.Fatalf("no spec.kopia.%s in the CRD", field)
	}
	m := regexp.MustCompile(`rule: self in \[([^\]]*)\]`).FindStringSubmatch(crd[i:])
	if m == nil {
		t.Fatalf("no CEL rule of spec.kopia.%s", field)
	}
	var values []string
	for _, v := range strings.Split(strings.Join(strings.Fields(m[1]), ""), ",") {
		values = append(values, strings.Trim(v, "'"))
	}
	return values
}

// The values spec.kopia.compression and spec.kopia.splitter admit are the ones the mover takes,
// and each is a compressor or splitter kopia v0.22.3 has: a value the API admits and the mover
// refused would fail every backup of the PVCBackup.
func TestTheAPIsFormatValuesAreTheMoversAndKopias(t *testing.T) {
	raw, err := os.ReadFile("../../../../config/crd/bases/storage.okgoes.com_pvcbackups.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := string(raw)
	if got := celValues(t, crd, "compression"); !slices.Equal(got, kopiarepo.Compressions) {
		t.Errorf("spec.kopia.compression admits %v, the mover takes %v", got, kopiarepo.Compressions)
	}
	if got := celValues(t, crd, "splitter"); !slices.Equal(got, kopiarepo.Splitters) {
		t.Errorf("spec.kopia.splitter admits %v, the mover takes %v", got, kopiarepo.Splitters)
	}
	for _, name := range kopiarepo.Compressions {
		if _, ok := compression.ByName[compression.Name(name)]; !ok && name != "none" {
			t.Errorf("kopia has no compressor %q", name)
		}
	}
	for _, name := range kopiarepo.Splitters {
		if splitter.GetFactory(name) == nil {
			t.Errorf("kopia has no splitter %q", name)
		}
	}
	if !slices.Contains(kopiarepo.Splitters, kopiarepo.DefaultSplitter) || !slices.Contains(kopiarepo.Compressions, string(kopiarepo.DefaultCompression)) {
		t.Errorf("the defaults %s and %s are not among the values", kopiarepo.DefaultSplitter, kopiarepo.DefaultCompression)
	}
}

// The mover takes the splitter and the compression from its environment, and refuses a name it
// does not know before it touches the repository.
func TestFromEnvReadsSplitterAndCompression(t *testing.T) {
	env := map[string]string{mover.EnvKopiaPassword: "secret", mover.EnvKopiaPrefix: "p/",
		mover.EnvKopiaSplitter: "DYNAMIC-1M-BUZHASH", mover.EnvKopiaCompression: "zstd"}
	e, err := FromEnv(func(k string) string { return env[k] }, true)
	if err != nil || e.Options.Splitter != "DYNAMIC-1M-BUZHASH" || e.Options.Compression != "zstd" {
		t.Errorf("FromEnv: splitter %q, compression %q, %v", e.Options.Splitter, e.Options.Compression, err)
	}
	for k, v := range map[string]string{mover.EnvKopiaSplitter: "DYNAMIC-3M-BUZHASH", mover.EnvKopiaCompression: "lz4"} {
		bad := map[string]string{mover.EnvKopiaPassword: "secret", mover.EnvKopiaPrefix: "p/", k: v}
		if _, err := FromEnv(func(k string) string { return bad[k] }, true); err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("FromEnv with %s=%s: %v, want an error naming it", k, v, err)
		}
	}
}
