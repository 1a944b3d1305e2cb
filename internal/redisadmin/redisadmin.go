// Package redisadmin asks a Redis server about its replication and changes it (INFO replication,
// REPLICAOF), over go-redis. Each call opens one connection and closes it: the operator talks to
// each pod a few times a minute at most, and a pooled connection to a pod that was replaced would
// only hide that it is gone.
package redisadmin

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// go-redis logs dial failures of its pool on its own; every failure is returned to the caller,
// which reports it (a condition, the reconcile log), so the library's log is silenced.
func init() { redis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// Roles as INFO replication reports them.
const (
	RolePrimary = "master"
	RoleReplica = "slave"
)

// Info is the part of INFO replication the operator decides on.
type Info struct {
	// Role is RolePrimary or RoleReplica.
	Role string
	// MasterHost and MasterPort are what a replica replicates (empty on a primary).
	MasterHost string
	MasterPort int32
	// MasterLinkUp is true on a replica whose link to its primary is up (initial sync done).
	MasterLinkUp bool
	// Offset is the replication offset the server has processed (master_repl_offset: on a
	// primary what it has produced, on a replica what it has applied). Offsets of a primary and
	// of the replicas promoted from it continue one another (PSYNC2), so they compare.
	Offset int64
	// ReplID is the replication id of the history the server follows.
	ReplID string
	// Keys is the number of keys in all databases (INFO keyspace). Servers that restarted from
	// their own snapshot or append-only file report offset 0 whatever they loaded: then only
	// the keys tell the one that kept data from one that starts empty.
	Keys int64
	// UsedMemory and MaxMemory are used_memory and maxmemory (INFO memory), in bytes; MaxMemory
	// is 0 when the server has no limit. EvictedKeys is evicted_keys (INFO stats): keys removed
	// to stay under maxmemory since the server started. The operator only exports them.
	UsedMemory, MaxMemory, EvictedKeys int64
}

// Client talks to Redis servers. The zero value uses a 2 s timeout per call.
type Client struct {
	// Timeout bounds each call (dial, write, read).
	Timeout time.Duration
}

func (c Client) client(addr, password string) *redis.Client {
	t := c.Timeout
	if t == 0 {
		t = 2 * time.Second
	}
	return redis.NewClient(&redis.Options{
		Addr: addr, Password: password,
		DialTimeout: t, ReadTimeout: t, WriteTimeout: t,
		PoolSize: 1, MaxRetries: -1, // one attempt: the reconcile decides what to do next
		DisableIdentity: true, // no CLIENT SETINFO: older servers answer it with an error
		Protocol:        2,
	})
}

// Replication returns the replication state of the server at addr (host:port).
func (c Client) Replication(ctx context.Context, addr, password string) (Info, error) {
	rdb := c.client(addr, password)
	defer func() { _ = rdb.Close() }()
	// Four sections in one round trip (INFO with several sections needs Redis 7).
	pipe := rdb.Pipeline()
	sections := []*redis.StringCmd{pipe.Info(ctx, "replication"), pipe.Info(ctx, "keyspace"), pipe.Info(ctx, "memory"), pipe.Info(ctx, "stats")}
	if _, err := pipe.Exec(ctx); err != nil {
		return Info{}, fmt.Errorf("INFO replication, keyspace, memory, stats at %s: %w", addr, err)
	}
	var text strings.Builder
	for _, s := range sections {
		text.WriteString(s.Val())
	}
	return ParseInfo(text.String())
}

// ReplicaOf makes the server at addr replicate host:port, or, with host "", a primary
// (REPLICAOF NO ONE). Both are no-ops for a server that already is what is asked.
func (c Client) ReplicaOf(ctx context.Context, addr, password, host string, port int32) error {
	rdb := c.client(addr, password)
	defer func() { _ = rdb.Close() }()
	cmd := []string{"REPLICAOF", "NO", "ONE"}
	if host != "" {
		cmd = []string{"REPLICAOF", host, strconv.Itoa(int(port))}
	}
	args := make([]any, len(cmd))
	for i, a := range cmd {
		args[i] = a
	}
	if err := rdb.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("%s at %s: %w", strings.Join(cmd, " "), addr, err)
	}
	return nil
}

// PauseWrites makes the server at addr hold the writes of its clients for d (CLIENT PAUSE WRITE);
// reads and replication go on. d == 0 lifts a pause (CLIENT UNPAUSE).
func (c Client) PauseWrites(ctx context.Context, addr, password string, d time.Duration) error {
	rdb := c.client(addr, password)
	defer func() { _ = rdb.Close() }()
	args := []any{"CLIENT", "UNPAUSE"}
	if d > 0 {
		args = []any{"CLIENT", "PAUSE", strconv.FormatInt(d.Milliseconds(), 10), "WRITE"}
	}
	if err := rdb.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("%v at %s: %w", args[:2], addr, err)
	}
	return nil
}

// KillClients disconnects the clients of the server at addr (CLIENT KILL TYPE normal, then
// pubsub); replication links and the caller's own connection stay. A former primary's clients
// reconnect, through the Service, to the new primary instead of writing to a replica (refused)
// or, worse, to a server that still takes writes nobody will keep.
func (c Client) KillClients(ctx context.Context, addr, password string) error {
	rdb := c.client(addr, password)
	defer func() { _ = rdb.Close() }()
	for _, kind := range []string{"normal", "pubsub"} {
		if err := rdb.Do(ctx, "CLIENT", "KILL", "TYPE", kind).Err(); err != nil {
			return fmt.Errorf("CLIENT KILL TYPE %s at %s: %w", kind, addr, err)
		}
	}
	return nil
}

// MinReplicas is the write guard of a primary: it refuses writes (NOREPLICAS) while fewer than
// ToWrite replicas acknowledged the replication stream within MaxLagSeconds. ToWrite 0 is off.
type MinReplicas struct {
	ToWrite, MaxLagSeconds int32
}

// EnsureMinReplicas sets min-replicas-to-write and min-replicas-max-lag of the server at addr to
// m (CONFIG SET, no restart) when they differ, and reports whether it changed them.
func (c Client) EnsureMinReplicas(ctx context.Context, addr, password string, m MinReplicas) (bool, error) {
	rdb := c.client(addr, password)
	defer func() { _ = rdb.Close() }()
	cur, err := rdb.ConfigGet(ctx, "min-replicas-*").Result()
	if err != nil {
		return false, fmt.Errorf("CONFIG GET min-replicas-* at %s: %w", addr, err)
	}
	want := map[string]string{
		"min-replicas-to-write": strconv.Itoa(int(m.ToWrite)),
		"min-replicas-max-lag":  strconv.Itoa(int(m.MaxLagSeconds)),
	}
	if cur["min-replicas-to-write"] == want["min-replicas-to-write"] && cur["min-replicas-max-lag"] == want["min-replicas-max-lag"] {
		return false, nil
	}
	// One parameter per CONFIG SET (Redis 6 takes no more); the lag first, so that a guard being
	// turned on never runs with an old lag.
	for _, k := range []string{"min-replicas-max-lag", "min-replicas-to-write"} {
		if err := rdb.ConfigSet(ctx, k, want[k]).Err(); err != nil {
			return false, fmt.Errorf("CONFIG SET %s at %s: %w", k, addr, err)
		}
	}
	return true, nil
}

// Alive tells whether the server at addr answers at all within timeout: it sends PING on a new
// connection and takes any reply, an error such as NOAUTH included, as a sign of life. It needs no
// password: it is the operator's frequent look at a primary (see controllers/cache primaryProbe),
// which must notice a server that hangs or is cut off, not judge its state.
func Alive(ctx context.Context, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer func() { _ = conn.Close() }()
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return fmt.Errorf("PING %s: %w", addr, err)
	}
	b := make([]byte, 1)
	if _, err := conn.Read(b); err != nil {
		return fmt.Errorf("PING %s: no answer within %s: %w", addr, timeout, err)
	}
	return nil
}

// EnsurePassword makes the server at addr accept password, authenticating with password or, when
// the server does not take it yet, with previous (a rotation in progress). It adds password to
// the default user (ACL SETUSER default >password: the old one keeps working for the clients
// that still use it), sets masterauth to it (the replication link of a replica), and, when
// previous is "" (the rotation is over), removes every other password of the default user. No
// restart; nothing is written when the server is already as asked. It reports what it changed.
func (c Client) EnsurePassword(ctx context.Context, addr, password, previous string) (changed bool, err error) {
	rdb := c.client(addr, password)
	defer func() { _ = rdb.Close() }()
	current := true
	if err := rdb.Ping(ctx).Err(); err != nil {
		if !isAuthError(err) || previous == "" {
			return false, fmt.Errorf("AUTH at %s: %w", addr, err)
		}
		_ = rdb.Close()
		rdb = c.client(addr, previous)
		if err := rdb.Ping(ctx).Err(); err != nil {
			return false, fmt.Errorf("AUTH at %s with the current and the previous password: %w", addr, err)
		}
		current = false
	}
	if !current {
		if err := rdb.Do(ctx, "ACL", "SETUSER", "default", "on", ">"+password).Err(); err != nil {
			return false, fmt.Errorf("ACL SETUSER default at %s: %w", addr, err)
		}
		changed = true
	}
	auth, err := rdb.ConfigGet(ctx, "masterauth").Result()
	if err != nil {
		return changed, fmt.Errorf("CONFIG GET masterauth at %s: %w", addr, err)
	}
	if auth["masterauth"] != password {
		if err := rdb.ConfigSet(ctx, "masterauth", password).Err(); err != nil {
			return changed, fmt.Errorf("CONFIG SET masterauth at %s: %w", addr, err)
		}
		changed = true
	}
	if previous != "" {
		return changed, nil
	}
	user, err := rdb.Do(ctx, "ACL", "GETUSER", "default").Slice()
	if err != nil {
		return changed, fmt.Errorf("ACL GETUSER default at %s: %w", addr, err)
	}
	for i := 0; i+1 < len(user); i += 2 {
		if k, _ := user[i].(string); k == "passwords" {
			if list, _ := user[i+1].([]any); len(list) > 1 {
				if err := rdb.Do(ctx, "ACL", "SETUSER", "default", "resetpass", ">"+password).Err(); err != nil {
					return changed, fmt.Errorf("ACL SETUSER default resetpass at %s: %w", addr, err)
				}
				changed = true
			}
		}
	}
	return changed, nil
}

// isAuthError tells whether err is Redis refusing the password (or asking for one).
func isAuthError(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") || strings.Contains(msg, "invalid password")
}

// ParseInfo reads the output of INFO replication, keyspace, memory and stats.
func ParseInfo(text string) (Info, error) {
	var in Info
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch k {
		case "role":
			in.Role = v
		case "master_host":
			in.MasterHost = v
		case "master_port":
			p, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return Info{}, fmt.Errorf("master_port %q: %w", v, err)
			}
			in.MasterPort = int32(p)
		case "master_link_status":
			in.MasterLinkUp = v == "up"
		case "master_repl_offset":
			o, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return Info{}, fmt.Errorf("master_repl_offset %q: %w", v, err)
			}
			in.Offset = o
		case "master_replid":
			in.ReplID = v
		case "used_memory":
			if err := parseCount(k, v, &in.UsedMemory); err != nil {
				return Info{}, err
			}
		case "maxmemory":
			if err := parseCount(k, v, &in.MaxMemory); err != nil {
				return Info{}, err
			}
		case "evicted_keys":
			if err := parseCount(k, v, &in.EvictedKeys); err != nil {
				return Info{}, err
			}
		default:
			// db0:keys=100,expires=0,avg_ttl=0
			if n, found := strings.CutPrefix(v, "keys="); found && strings.HasPrefix(k, "db") {
				n, _, _ = strings.Cut(n, ",")
				c, err := strconv.ParseInt(n, 10, 64)
				if err != nil {
					return Info{}, fmt.Errorf("%s keys %q: %w", k, n, err)
				}
				in.Keys += c
			}
		}
	}
	if in.Role != RolePrimary && in.Role != RoleReplica {
		return Info{}, fmt.Errorf("INFO replication without a known role: %q", in.Role)
	}
	return in, nil
}

// parseCount reads the number v of the INFO field k into n.
func parseCount(k, v string, n *int64) error {
	c, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return fmt.Errorf("%s %q: %w", k, v, err)
	}
	*n = c
	return nil
}

// Persistence is the part of INFO persistence a backup decides on.
type Persistence struct {
	// BGSaveInProgress is rdb_bgsave_in_progress: a child is writing the RDB snapshot.
	BGSaveInProgress bool
	// Saves is rdb_saves (Redis 7): the RDB snapshots written since the server started. A save
	// the operator asked for is done when it is higher than before the BGSAVE and no save runs.
	Saves int64
	// LastBGSaveOK is rdb_last_bgsave_status:ok.
	LastBGSaveOK bool
}

// Persistence returns INFO persistence of the server at addr.
func (c Client) Persistence(ctx context.Context, addr, password string) (Persistence, error) {
	rdb := c.client(addr, password)
	defer func() { _ = rdb.Close() }()
	text, err := rdb.Info(ctx, "persistence").Result()
	if err != nil {
		return Persistence{}, fmt.Errorf("INFO persistence at %s: %w", addr, err)
	}
	return ParsePersistence(text)
}

// ParsePersistence reads the output of INFO persistence. A server without rdb_saves (older than
// Redis 7) is an error: the operator could not tell its save from an earlier one.
func ParsePersistence(text string) (Persistence, error) {
	var p Persistence
	seen := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch k {
		case "rdb_bgsave_in_progress":
			p.BGSaveInProgress = v == "1"
		case "rdb_last_bgsave_status":
			p.LastBGSaveOK = v == "ok"
		case "rdb_saves":
			if err := parseCount(k, v, &p.Saves); err != nil {
				return Persistence{}, err
			}
			seen = true
		}
	}
	if !seen {
		return Persistence{}, fmt.Errorf("INFO persistence has no rdb_saves: Redis 7 or later is needed to back up a cache")
	}
	return p, nil
}

// BGSave asks the server at addr to write its RDB snapshot in the background. Redis refuses it
// while another child (a save, an append-only file rewrite) runs; the error says so.
func (c Client) BGSave(ctx context.Context, addr, password string) error {
	rdb := c.client(addr, password)
	defer func() { _ = rdb.Close() }()
	if err := rdb.BgSave(ctx).Err(); err != nil {
		return fmt.Errorf("BGSAVE at %s: %w", addr, err)
	}
	return nil
}
