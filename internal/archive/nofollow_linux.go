package archive

import "syscall"

// syscallNoFollow makes creating a restored file fail rather than follow a symlink.
const syscallNoFollow = syscall.O_NOFOLLOW
