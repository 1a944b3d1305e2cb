package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// restoreFS names the file system that holds dir (the restore targets) as /proc/self/mountinfo
// has it, and says when it is ext4 without a journal. There, ext4 does not reuse an inode
// deleted in the last 60 s (300 s while its inode table block is dirty): each new file scans
// past every such inode (recently_deleted in fs/ext4/ialloc.c), so a restore that follows the
// removal of another tree — the previous tool's restore, a regenerated source — costs several
// times the CPU of one that does not, for every tool (docs/benchmarks.md, "Restore: where the
// time goes").
func restoreFS(dir string) (string, bool) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", false
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	defer f.Close()
	var best, fsType, source string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		mp := fields[4]
		if (abs == mp || strings.HasPrefix(abs, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, fsType, source = mp, fields[sep+1], fields[sep+2]
		}
	}
	desc := fsType + " " + source + " at " + best
	if fsType != "ext4" {
		return desc, false
	}
	journal, err := os.ReadFile(filepath.Join("/sys/fs/ext4", filepath.Base(source), "journal_task"))
	if err == nil && strings.TrimSpace(string(journal)) == "<none>" {
		return desc + ", without a journal", true
	}
	return desc, false
}
