package kopia

import (
	"testing"

	"github.com/okgoes/okgoes-operator/internal/kopiarepo"
	"github.com/okgoes/okgoes-operator/internal/mover"
)

// The controller sets EnvKopiaKeyDerivation from the contract's names, which must be kopia's
// own (kopiarepo's), or a new repository would get another key derivation than spec.kopia asks.
func TestKeyDerivationNamesAreKopias(t *testing.T) {
	for _, kd := range []struct{ contract, kopia string }{
		{mover.KeyDerivationScrypt, kopiarepo.KeyDerivationScrypt},
		{mover.KeyDerivationPBKDF2, kopiarepo.KeyDerivationPBKDF2},
	} {
		if kd.contract != kd.kopia {
			t.Errorf("internal/mover says %q, kopia %q", kd.contract, kd.kopia)
		}
	}
}

// A backup needs the repository's prefix; a restore or verify reads the one its manifest names.
func TestFromEnvNeedsThePrefixOnlyForABackup(t *testing.T) {
	env := map[string]string{mover.EnvKopiaPassword: "secret"}
	getenv := func(k string) string { return env[k] }
	if _, err := FromEnv(getenv, true); err == nil {
		t.Errorf("a backup without %s: no error", mover.EnvKopiaPrefix)
	}
	if _, err := FromEnv(getenv, false); err != nil {
		t.Errorf("a restore without %s: %v", mover.EnvKopiaPrefix, err)
	}
	env[mover.EnvKopiaPrefix] = "ns/app/kopia"
	e, err := FromEnv(getenv, true)
	if err != nil || e.Options.Prefix != "ns/app/kopia" || e.Options.Password != "secret" {
		t.Errorf("FromEnv: prefix %q, password set %v, %v", e.Options.Prefix, e.Options.Password != "", err)
	}
}
