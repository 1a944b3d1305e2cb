package run

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	. "github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/mover/engine/archive"
	"github.com/okgoes/okgoes-operator/internal/mover/engine/kopia"
)

// The engine comes from MOVER_ENGINE, for every command; an unknown name is an InvalidConfig
// (the controller wrote a Job this mover cannot run), never a run with another engine.
func TestTheEngineIsPickedFromTheEnvironment(t *testing.T) {
	base := env{EnvKopiaPassword: "secret", EnvKopiaPrefix: "ns/app/kopia"}
	for _, tt := range []struct {
		engine string
		want   Engine
	}{
		{"", archive.Engine{}},
		{EngineArchive, archive.Engine{}},
		{EngineKopia, kopia.Engine{}},
	} {
		e := env{EnvEngine: tt.engine}
		for k, v := range base {
			e[k] = v
		}
		got, err := pick(e.get, true)
		if err != nil {
			t.Errorf("%s=%q: %v", EnvEngine, tt.engine, err)
			continue
		}
		switch got.(type) {
		case archive.Engine:
			if _, ok := tt.want.(archive.Engine); !ok {
				t.Errorf("%s=%q picks the archive engine", EnvEngine, tt.engine)
			}
		case kopia.Engine:
			if _, ok := tt.want.(kopia.Engine); !ok {
				t.Errorf("%s=%q picks the kopia engine", EnvEngine, tt.engine)
			}
		}
	}
	if _, err := pick(env{EnvEngine: "restic"}.get, false); err == nil {
		t.Error("an unknown engine was picked")
	}
}

func TestEveryCommandRefusesAnUnknownEngine(t *testing.T) {
	e := env{EnvEngine: "restic", EnvEndpoint: "127.0.0.1:1", EnvBucket: "b", EnvAccessKey: "a", EnvSecretKey: "s",
		EnvBackupID: "id", EnvSourceDir: t.TempDir(), EnvTargetDir: t.TempDir(), EnvArchiveKey: "k", EnvManifestKey: "m",
		EnvTerminationLog: filepath.Join(t.TempDir(), "termination-log")}
	for name, res := range map[string]Result{
		"backup":  Backup(context.Background(), e.get, "test"),
		"restore": Restore(context.Background(), e.get),
		"verify":  Verify(context.Background(), e.get),
	} {
		if res.Result != Failed || res.Reason != ReasonInvalidConfig || !strings.Contains(res.Message, "restic") {
			t.Errorf("%s with %s=restic: %+v, want InvalidConfig naming the engine", name, EnvEngine, res)
		}
	}
}

// A failed run reports its Reason and what identifies the backup, never counts an engine
// gathered before it failed; a success is the engine's Result, marked Succeeded.
func TestResultOf(t *testing.T) {
	engines := Result{ID: "20261203T020000Z", ArchiveKey: "ns/app/x.tar.zst", SnapshotID: "k1", Bytes: 10, Files: 2, SHA256: "ab"}
	stalled := Fail(ReasonStorageStalled, "S3 made no progress")
	for _, tt := range []struct {
		err  error
		want Result
	}{
		{nil, Result{Result: Succeeded, ID: "20261203T020000Z", ArchiveKey: "ns/app/x.tar.zst", SnapshotID: "k1", Bytes: 10, Files: 2, SHA256: "ab"}},
		{stalled, Result{Result: Failed, Reason: ReasonStorageStalled, Message: "S3 made no progress",
			ID: "20261203T020000Z", ArchiveKey: "ns/app/x.tar.zst", SnapshotID: "k1"}},
		{errors.New("connection reset"), Result{Result: Failed, Reason: ReasonStorageFailed, Message: "connection reset",
			ID: "20261203T020000Z", ArchiveKey: "ns/app/x.tar.zst", SnapshotID: "k1"}},
	} {
		if got := resultOf(engines, tt.err); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("resultOf(%v) = %+v, want %+v", tt.err, got, tt.want)
		}
	}
}
