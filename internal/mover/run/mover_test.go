package run

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/okgoes/okgoes-operator/internal/archive"
	. "github.com/okgoes/okgoes-operator/internal/mover"
	"github.com/okgoes/okgoes-operator/internal/objectstore"
	"github.com/okgoes/okgoes-operator/internal/testenv"
)

type env map[string]string

func (e env) get(k string) string { return e[k] }

// setup starts a real MinIO with a bucket and returns the mover environment for it.
func setup(t testing.TB, source string) (env, *testenv.MinIO) {
	t.Helper()
	m := testenv.StartMinIO(t)
	admin, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.MakeBucket(context.Background(), "backups", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	return env{
		EnvSourceDir: source, EnvEndpoint: m.Endpoint, EnvBucket: "backups", EnvInsecure: "true",
		EnvAccessKey: m.AccessKey, EnvSecretKey: m.SecretKey, EnvBackupID: "20261203T020000Z",
		EnvArchiveKey: "ns/app/20261203T020000Z.tar.zst", EnvManifestKey: "ns/app/20261203T020000Z.manifest.json",
		EnvSourceNamespace: "ns", EnvSourcePVC: "data", EnvScheduledTime: "2026-12-03T02:00:00Z",
		EnvPartSize: fmt.Sprint(5 << 20), EnvTerminationLog: filepath.Join(t.TempDir(), "termination-log"),
	}, m
}

// storeOf is the Config of the environment e and a store of its bucket.
func storeOf(t testing.TB, e env) (Config, *objectstore.Store) {
	t.Helper()
	cfg, err := ConfigFromEnv(e.get)
	if err != nil {
		t.Fatal(err)
	}
	store, err := objectstore.New(cfg.Store)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, store
}

func TestBackupThenVerifyFromMinIO(t *testing.T) {
	src := t.TempDir()
	data := make([]byte, 12<<20) // several parts
	rand.NewChaCha8([32]byte{3}).Read(data)
	os.WriteFile(filepath.Join(src, "blob"), data, 0o600)
	os.Mkdir(filepath.Join(src, "empty"), 0o755)
	os.Symlink("blob", filepath.Join(src, "link"))
	e, _ := setup(t, src)

	res := Backup(context.Background(), e.get, "v-test")
	if res.Result != "Succeeded" || res.Files != 1 {
		t.Fatalf("RunBackup = %+v", res)
	}
	var reported Result
	raw, _ := os.ReadFile(e[EnvTerminationLog])
	if err := json.Unmarshal(raw, &reported); err != nil || !reflect.DeepEqual(reported, res) {
		t.Errorf("termination log %s does not match %+v", raw, res)
	}

	_, store := storeOf(t, e)
	mr, err := store.Get(context.Background(), e[EnvManifestKey])
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadManifest(mr)
	mr.Close()
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "20261203T020000Z" || m.Source.PVC != "data" || m.OperatorVersion != "v-test" || !m.ScheduledTime.Equal(time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC)) {
		t.Errorf("manifest: %+v", m)
	}
	ar, err := store.Get(context.Background(), m.Archive.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer ar.Close()
	dst := t.TempDir()
	st, err := archive.Read(context.Background(), ar, dst, archive.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Verify(st); err != nil {
		t.Errorf("restored archive does not match its manifest: %v", err)
	}
	got, _ := os.ReadFile(filepath.Join(dst, "blob"))
	if sha256.Sum256(got) != sha256.Sum256(data) {
		t.Error("restored content differs")
	}
}

func TestFailedBackupLeavesNoManifest(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o600)
	tests := []struct {
		name   string
		change func(env)
		want   string
	}{
		{"bucket missing", func(e env) { e[EnvBucket] = "nope" }, "does not exist"},
		{"wrong secret key", func(e env) { e[EnvSecretKey] = "wrong" }, "signature"},
		{"source missing", func(e env) { e[EnvSourceDir] = "/nonexistent" }, "/nonexistent"},
		{"credentials not given", func(e env) { delete(e, EnvAccessKey) }, EnvAccessKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, m := setup(t, src)
			tt.change(e)
			res := Backup(context.Background(), e.get, "test")
			if res.Result != "Failed" || !strings.Contains(res.Message, tt.want) {
				t.Fatalf("RunBackup = %+v, want a failure mentioning %q", res, tt.want)
			}
			if strings.Contains(res.Message, m.SecretKey) {
				t.Error("the failure message shows the secret key")
			}
			admin, _ := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
			for o := range admin.ListObjects(context.Background(), "backups", minio.ListObjectsOptions{Recursive: true}) {
				if strings.HasSuffix(o.Key, ".manifest.json") {
					t.Errorf("a failed backup wrote a manifest: %s", o.Key)
				}
			}
		})
	}
}

// The benchmarks below compare `mover backup` with a plain minio-go PutObject of the same bytes,
// both run as child processes so their peak RSS can be read from the kernel:
//
//	go test ./internal/mover/run/ -run '^$' -bench . -benchtime 1x
//
// BENCH_GIB sets the volume size (default 1).

func TestMain(m *testing.M) {
	switch os.Getenv("MOVER_BENCH_CHILD") {
	case "mover":
		res := Backup(context.Background(), os.Getenv, "bench")
		if res.Result != "Succeeded" {
			fmt.Fprintln(os.Stderr, res.Message)
			os.Exit(1)
		}
		os.Exit(0)
	case "putobject":
		os.Exit(plainPut())
	case "backup-result": // the Result as JSON on stdout, whatever it is
		if n, err := strconv.Atoi(os.Getenv(envMinIORetries)); err == nil {
			minio.MaxRetry = n // kopia's own retries then give up within ~12 s of refused connections
		}
		_ = json.NewEncoder(os.Stdout).Encode(Backup(context.Background(), os.Getenv, "test"))
		os.Exit(0)
	case "restore-result": // the Result as JSON on stdout, whatever it is
		_ = json.NewEncoder(os.Stdout).Encode(Restore(context.Background(), os.Getenv))
		os.Exit(0)
	case "restore":
		if res := Restore(context.Background(), os.Getenv); res.Result != "Succeeded" {
			fmt.Fprintln(os.Stderr, res.Message)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// plainPut uploads the single file of the source directory with minio-go PutObject, the way any
// client would: the baseline for the mover.
func plainPut() int {
	dir := os.Getenv(EnvSourceDir)
	f, err := os.Open(filepath.Join(dir, "volume.bin"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	fi, _ := f.Stat()
	client, err := minio.New(os.Getenv(EnvEndpoint), &minio.Options{Creds: credentials.NewStaticV4(os.Getenv(EnvAccessKey), os.Getenv(EnvSecretKey), "")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := client.PutObject(context.Background(), os.Getenv(EnvBucket), "plain", f, fi.Size(), minio.PutObjectOptions{PartSize: DefaultPartSize, NumThreads: 1}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func benchVolume(b *testing.B) (string, int64) {
	gib := int64(1)
	if s := os.Getenv("BENCH_GIB"); s != "" {
		fmt.Sscan(s, &gib)
	}
	dir := b.TempDir()
	f, err := os.Create(filepath.Join(dir, "volume.bin"))
	if err != nil {
		b.Fatal(err)
	}
	// Incompressible data: the worst case for the mover, and an honest one for throughput.
	if _, err := io.CopyN(f, rand.NewChaCha8([32]byte{5}), gib<<30); err != nil {
		b.Fatal(err)
	}
	f.Close()
	return dir, gib << 30
}

func runChild(b *testing.B, role string, e env) (time.Duration, int64) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "MOVER_BENCH_CHILD="+role)
	for k, v := range e {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("%s: %v", role, err)
	}
	return time.Since(start), cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss * 1024
}

func benchmarkChild(b *testing.B, role string) {
	dir, size := benchVolume(b)
	e, _ := setup(b, dir)
	e[EnvPartSize] = fmt.Sprint(DefaultPartSize)
	b.SetBytes(size)
	b.ResetTimer()
	var rss int64
	for b.Loop() {
		_, r := runChild(b, role, e)
		rss = max(rss, r)
	}
	b.ReportMetric(float64(rss)/(1<<20), "peakRSS-MiB")
}

func BenchmarkMoverBackup(b *testing.B)    { benchmarkChild(b, "mover") }
func BenchmarkPlainPutObject(b *testing.B) { benchmarkChild(b, "putobject") }

// BenchmarkMoverRestore times `mover restore` (download, verify, write) of a backup of the same
// volume into a fresh directory each time.
func BenchmarkMoverRestore(b *testing.B) {
	dir, size := benchVolume(b)
	e, _ := setup(b, dir)
	e[EnvPartSize] = fmt.Sprint(DefaultPartSize)
	runChild(b, "mover", e) // the backup to restore, untimed
	b.SetBytes(size)
	benchmarkRestores(b, e, func() {})
}

// benchmarkRestores times restores of the backup of e into empty targets, each in a child
// process after newPod (untimed), and reports their peak RSS.
func benchmarkRestores(b *testing.B, e env, newPod func()) {
	var rss int64
	for b.Loop() {
		b.StopTimer()
		target := b.TempDir()
		e[EnvTargetDir] = target
		newPod()
		b.StartTimer()
		_, r := runChild(b, "restore", e)
		rss = max(rss, r)
		b.StopTimer()
		os.RemoveAll(target)
		b.StartTimer()
	}
	b.ReportMetric(float64(rss)/(1<<20), "peakRSS-MiB")
}
