package redisadmin

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestParseInfo(t *testing.T) {
	replica := "# Replication\r\nrole:slave\r\nmaster_host:10.0.0.7\r\nmaster_port:6380\r\nmaster_link_status:up\r\n" +
		"slave_repl_offset:4242\r\nmaster_replid:abc\r\nmaster_repl_offset:4242\r\n"
	got, err := ParseInfo(replica)
	want := Info{Role: RoleReplica, MasterHost: "10.0.0.7", MasterPort: 6380, MasterLinkUp: true, Offset: 4242, ReplID: "abc"}
	if err != nil || got != want {
		t.Errorf("ParseInfo(replica) = %+v, %v; want %+v", got, err, want)
	}
	if got, err := ParseInfo("role:master\r\nconnected_slaves:0\r\nmaster_repl_offset:0\r\n"); err != nil || got.Role != RolePrimary {
		t.Errorf("ParseInfo(primary) = %+v, %v", got, err)
	}
	keyspace := "# Replication\r\nrole:slave\r\nmaster_repl_offset:0\r\n# Keyspace\r\ndb0:keys=100,expires=2,avg_ttl=0\r\ndb3:keys=7,expires=0,avg_ttl=0\r\n"
	if got, err := ParseInfo(keyspace); err != nil || got.Keys != 107 {
		t.Errorf("ParseInfo(with keyspace) = %+v, %v; want 107 keys", got, err)
	}
	memory := "# Replication\r\nrole:master\r\n# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\nmaxmemory:2097152\r\n" +
		"# Stats\r\nevicted_keys:12\r\nexpired_keys:3\r\n"
	if got, err := ParseInfo(memory); err != nil || got.UsedMemory != 1<<20 || got.MaxMemory != 2<<20 || got.EvictedKeys != 12 {
		t.Errorf("ParseInfo(with memory and stats) = %+v, %v; want 1 MiB used of 2 MiB, 12 evicted", got, err)
	}
	for _, bad := range []string{"", "role:sentinel\r\n", "role:master\r\nused_memory:x\r\n", "role:slave\r\nmaster_port:x\r\n", "role:slave\r\ndb0:keys=x,expires=0\r\n"} {
		if _, err := ParseInfo(bad); err == nil {
			t.Errorf("ParseInfo(%q) accepted", bad)
		}
	}
}

// TestReplicaOfOnRealRedis: a second redis-server becomes a replica of the first, then a
// primary again; a server that is not there is an error within the timeout.
func TestReplicaOfOnRealRedis(t *testing.T) {
	ctx := context.Background()
	a, b := startRedis(t), startRedis(t)
	c := Client{Timeout: time.Second}
	if err := c.ReplicaOf(ctx, b, "", "127.0.0.1", portOf(a)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		in, err := c.Replication(ctx, b, "")
		if err == nil && in.Role == RoleReplica && in.MasterPort == portOf(a) && in.MasterLinkUp {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b never linked to a: %+v %v", in, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := c.ReplicaOf(ctx, b, "", "", 0); err != nil {
		t.Fatal(err)
	}
	if in, err := c.Replication(ctx, b, ""); err != nil || in.Role != RolePrimary || in.Keys != 0 {
		t.Errorf("after REPLICAOF NO ONE: %+v %v", in, err)
	}
	// Keys counts every database.
	for db, key := range []string{"x", "y"} {
		rb := redis.NewClient(&redis.Options{Addr: b, DB: db, DisableIdentity: true, Protocol: 2})
		err := rb.Set(ctx, key, "1", 0).Err()
		_ = rb.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if in, err := c.Replication(ctx, b, ""); err != nil || in.Keys != 2 || in.UsedMemory <= 0 {
		t.Errorf("after writing a key in db 0 and db 1: %+v %v, want 2 keys and the memory used", in, err)
	}
	// A paused primary holds writes until unpaused.
	if err := c.PauseWrites(ctx, a, "", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: a, DisableIdentity: true, Protocol: 2, MaxRetries: -1, ReadTimeout: 300 * time.Millisecond})
	defer rdb.Close()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err == nil {
		t.Error("a write went through a CLIENT PAUSE WRITE")
	}
	if err := c.PauseWrites(ctx, a, "", 0); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Errorf("a write after CLIENT UNPAUSE: %v", err)
	}
	start := time.Now()
	if _, err := c.Replication(ctx, "127.0.0.1:1", ""); err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("a server that is not there: %v after %s", err, time.Since(start))
	}
}

func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is needed (apt-get install redis-server): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for i := 0; ; i++ {
		if _, err := (Client{}).Replication(context.Background(), addr, ""); err == nil {
			return addr
		} else if i > 100 {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func portOf(addr string) int32 {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return int32(n)
}

// TestAliveTellsAHungServerFromAnAnsweringOne: a server that answers (even NOAUTH: it has a
// password the probe does not know) is alive; the same server frozen (SIGSTOP: the kernel still
// accepts its connections) is not, within the timeout; a port nobody listens on is not either.
func TestAliveTellsAHungServerFromAnAnsweringOne(t *testing.T) {
	ctx := context.Background()
	addr, cmd := startRedisCmd(t, "--requirepass", "secret")
	if err := Alive(ctx, addr, time.Second); err != nil {
		t.Fatalf("an answering server (NOAUTH) is not alive: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGCONT) }()
	if err := Alive(ctx, addr, 300*time.Millisecond); err == nil {
		t.Error("a frozen server is alive")
	}
	if err := Alive(ctx, "127.0.0.1:1", 300*time.Millisecond); err == nil {
		t.Error("a port nobody listens on is alive")
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	if err := Alive(ctx, addr, time.Second); err != nil {
		t.Errorf("the thawed server is not alive: %v", err)
	}
}

// TestWriteGuardAndClientKill: EnsureMinReplicas sets the write guard once (a second call changes
// nothing) and a primary without the replica it asks for refuses writes (NOREPLICAS);
// KillClients closes a client's open connection but not the caller's.
func TestWriteGuardAndClientKill(t *testing.T) {
	ctx := context.Background()
	a := startRedis(t)
	c := Client{Timeout: time.Second}
	m := MinReplicas{ToWrite: 1, MaxLagSeconds: 7}
	if changed, err := c.EnsureMinReplicas(ctx, a, "", m); err != nil || !changed {
		t.Fatalf("first EnsureMinReplicas: changed %v, %v", changed, err)
	}
	if changed, err := c.EnsureMinReplicas(ctx, a, "", m); err != nil || changed {
		t.Errorf("second EnsureMinReplicas: changed %v, %v; want no change", changed, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: a, DisableIdentity: true, Protocol: 2, MaxRetries: -1, PoolSize: 1})
	defer rdb.Close()
	if got, err := rdb.ConfigGet(ctx, "min-replicas-*").Result(); err != nil || got["min-replicas-to-write"] != "1" || got["min-replicas-max-lag"] != "7" {
		t.Errorf("CONFIG GET min-replicas-*: %v %v", got, err)
	}
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOREPLICAS") {
		t.Errorf("a write to a primary without replicas under min-replicas-to-write 1: %v, want NOREPLICAS", err)
	}
	// A client with a connection open (raw: go-redis would quietly dial a new one).
	conn, err := net.Dial("tcp", a)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 64)
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Read(buf); err != nil {
		t.Fatal(err)
	}
	if err := c.KillClients(ctx, a, ""); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(buf); err == nil {
		t.Errorf("a client's connection survived KillClients: read %q", buf[:n])
	}
}

func startRedisCmd(t *testing.T, args ...string) (string, *exec.Cmd) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command("redis-server", append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--dir", t.TempDir()}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT); _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for i := 0; Alive(context.Background(), addr, time.Second) != nil; i++ {
		if i > 100 {
			t.Fatal("redis-server did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addr, cmd
}
