package cache

import (
	"testing"

	"github.com/okgoes/okgoes-operator/internal/redisadmin"
)

// TestBackupSourceKeepsTheSaveOffThePrimary: the replica with the highest offset among those
// ready, linked and in sync saves, with the primary's offset to reach; the primary saves only
// when no replica qualifies.
func TestBackupSourceKeepsTheSaveOffThePrimary(t *testing.T) {
	unlinked := replicaAt(1000)
	unlinked.MasterLinkUp = false
	for _, tc := range []struct {
		name       string
		replicas   []*member
		wantPod    string
		wantOffset int64
	}{
		{"no replica", nil, "c-0", 0},
		{"the most up-to-date replica", []*member{testMember(1, roleReplica, true, replicaAt(900)), testMember(2, roleReplica, true, replicaAt(990))}, "c-2", 1000},
		{"a tie goes to the lowest ordinal", []*member{testMember(2, roleReplica, true, replicaAt(1000)), testMember(1, roleReplica, true, replicaAt(1000))}, "c-1", 1000},
		{"not ready", []*member{testMember(1, roleReplica, false, replicaAt(1000))}, "c-0", 0},
		{"does not answer", []*member{testMember(1, roleReplica, true, nil)}, "c-0", 0},
		{"link down", []*member{testMember(1, roleReplica, true, unlinked)}, "c-0", 0},
		{"more than 1 MiB behind", []*member{testMember(1, roleReplica, true, replicaAt(1000-inSyncLagBytes-1))}, "c-0", 0},
		{"fenced, a replica of nothing", []*member{testMember(1, roleReplica, true, fenced())}, "c-0", 0},
		{"being deleted", []*member{deleted(testMember(1, roleReplica, true, replicaAt(1000)))}, "c-0", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testMember(0, rolePrimary, true, primaryAt(1000))
			src, offset := backupSource(p, append([]*member{p}, tc.replicas...))
			if src.pod.Name != tc.wantPod || offset != tc.wantOffset {
				t.Errorf("backupSource = %s, offset %d; want %s, %d", src.pod.Name, offset, tc.wantPod, tc.wantOffset)
			}
		})
	}
}

// TestParsePersistenceNeedsRDBSaves: the save is recognised by rdb_saves (Redis 7); a server
// without it cannot be backed up consistently and says so.
func TestParsePersistenceNeedsRDBSaves(t *testing.T) {
	p, err := redisadmin.ParsePersistence("# Persistence\r\nloading:0\r\nrdb_bgsave_in_progress:1\r\nrdb_last_bgsave_status:ok\r\nrdb_saves:7\r\n")
	if err != nil || !p.BGSaveInProgress || !p.LastBGSaveOK || p.Saves != 7 {
		t.Errorf("ParsePersistence = %+v, %v", p, err)
	}
	if _, err := redisadmin.ParsePersistence("# Persistence\r\nrdb_bgsave_in_progress:0\r\n"); err == nil {
		t.Error("INFO persistence without rdb_saves was accepted")
	}
}
