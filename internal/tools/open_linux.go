package tools

import (
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// errNoOpenat2 says the kernel (or a seccomp profile) has no openat2: walk
// the path one O_NOFOLLOW open at a time instead.
var errNoOpenat2 = errors.New("openat2 unavailable")

// noOpenat2 makes openat2 unavailable (tests of the walk).
var noOpenat2 bool

// openat2Beneath opens p beneath dirfd with RESOLVE_BENEATH,
// RESOLVE_NO_SYMLINKS and RESOLVE_NO_MAGICLINKS: no "..", absolute path or
// symbolic link of any kind on the way.
func openat2Beneath(dirfd int, p string, flags int) (int, error) {
	if noOpenat2 {
		return -1, errNoOpenat2
	}
	fd, err := unix.Openat2(dirfd, p, &unix.OpenHow{
		Flags:   uint64(flags) | unix.O_NOFOLLOW, //nolint:gosec // G115: open flags
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		return -1, errNoOpenat2
	}
	return fd, err
}

// openedPath is where the open file f is now, as the kernel says.
func openedPath(f *os.File) (string, bool) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil || !strings.HasPrefix(p, "/") || strings.HasSuffix(p, " (deleted)") {
		return "", false
	}
	return p, true
}

// onProcFS reports whether f is a file of /proc. Such a file is about the
// process that reads it: /proc/self/environ opened by the worker is the
// worker's environment, whatever a tool's own /proc/self shows.
func onProcFS(f *os.File) bool {
	var st unix.Statfs_t
	return unix.Fstatfs(int(f.Fd()), &st) == nil && st.Type == unix.PROC_SUPER_MAGIC
}
