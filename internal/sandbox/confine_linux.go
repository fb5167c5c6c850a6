package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Everything here runs on the helper's call thread: a fresh OS thread,
// locked to its goroutine, that prepares one call, forks the tool and then
// exits. Namespaces, mounts, Landlock, seccomp and capabilities set here are
// the thread's own, inherited by the tool and by nothing else.

// setupBase prepares the helper's own mount namespace once (namespaces
// mode): no propagation to or from the host, a /proc that shows only the
// helper's PID namespace, every mount read-only, and the hidden paths that
// exist covered. It returns the paths it covered.
func setupBase(hidden []string) ([]string, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, fmt.Errorf("mount /proc: %w", err)
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID}); err != nil {
		return nil, fmt.Errorf("make the file system read-only (mount_setattr, Linux 5.12): %w", err)
	}
	var covered []string
	for _, h := range hidden {
		if coveredBy(h, privateDirs) {
			continue // replaced per call anyway
		}
		ok, err := cover(h)
		if err != nil {
			return nil, err
		}
		if ok {
			covered = append(covered, h)
		}
	}
	return covered, nil
}

// cover makes p unreadable: a directory is covered by an empty tmpfs with
// mode 000, anything else by /dev/null. It reports whether p existed.
func cover(p string) (bool, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return false, nil //nolint:nilerr // nothing there to hide
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		// Hide what it points to; the link itself shows only a name.
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return false, nil //nolint:nilerr // dangling
		}
		return cover(real)
	}
	if fi.IsDir() {
		err = unix.Mount("fastagent-hidden", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=000,size=4k")
	} else {
		err = bindReadOnly("/dev/null", p)
	}
	if err != nil {
		return false, fmt.Errorf("hide %s: %w", p, err)
	}
	return true, nil
}

// bindReadOnly mounts a read-only copy of src (with what is mounted below
// it) on dst.
func bindReadOnly(src, dst string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("clone %s: %w", src, err)
	}
	defer func() { _ = unix.Close(fd) }()
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("read-only %s: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount on %s: %w", dst, err)
	}
	return nil
}

// nsCall is a namespaces-mode call's view, set up on the call thread.
type nsCall struct {
	req         *request
	baseCovered map[string]bool
	hidden      []string // the helper's hidden paths
}

// setup unshares the call's namespaces and builds its file system view:
// the private temporary directories replaced by a fresh tmpfs, the writable
// trees mounted read-write (and re-exposed when they lie in a private
// directory, as test workspaces in /tmp do), the protected paths read-only,
// the hidden ones covered.
func (c nsCall) setup() error {
	flags := unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWNET
	if err := unix.Unshare(flags); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	type keep struct {
		path string
		fd   int
		rw   bool
		dir  bool
	}
	var keeps []keep
	defer func() {
		for _, k := range keeps {
			_ = unix.Close(k.fd)
		}
	}()
	add := func(p string, rw bool) error {
		fi, err := os.Stat(p)
		if err != nil {
			return nil //nolint:nilerr // nothing to keep
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("clone %s: %w", p, err)
		}
		keeps = append(keeps, keep{p, fd, rw, fi.IsDir()})
		return nil
	}
	for _, w := range c.req.Writable {
		if err := add(w, true); err != nil {
			return err
		}
	}
	for _, v := range c.req.Visible {
		if coveredBy(v, privateDirs) && !coveredBy(v, c.req.Writable) {
			if err := add(v, false); err != nil {
				return err
			}
		}
	}
	if err := c.privateTmp(); err != nil {
		return err
	}
	if err := ownTerminals(); err != nil {
		return err
	}
	sort.Slice(keeps, func(i, j int) bool { return len(keeps[i].path) < len(keeps[j].path) })
	for _, k := range keeps {
		if err := mountKeep(k.path, k.fd, k.rw, k.dir); err != nil {
			return err
		}
	}
	var hide []string
	for _, h := range c.hidden {
		if !c.baseCovered[h] || coveredBy(h, c.req.Writable) || coveredBy(h, c.req.Visible) {
			hide = append(hide, h)
		}
	}
	hide = append(hide, c.req.Hidden...)
	// The folders that hold a protected or hidden entry, up to the writable
	// tree, become mount points of their own (still writable): a mount
	// point cannot be renamed, replaced or removed (EBUSY), so a tool
	// cannot move the agent's folder away and put a folder of its own, with
	// its own fastagent.yaml, at its name.
	for _, d := range holders(c.req.Writable, append(append([]string{}, c.req.Protected...), hide...)) {
		if err := bindSelf(d); err != nil {
			return err
		}
	}
	for _, p := range c.req.Protected {
		if coveredBy(p, hide) || !coveredBy(p, c.req.Writable) {
			continue
		}
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := bindReadOnly(p, p); err != nil {
			return err
		}
	}
	for _, h := range hide {
		if _, err := cover(h); err != nil {
			return err
		}
	}
	return nil
}

// holders returns the directories strictly between a writable tree and
// each of paths that lies inside it (the writable tree is a mount point
// already), parents before children, each once; only those that exist.
func holders(writable, paths []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range paths {
		for _, w := range writable {
			if !under(p, w) || p == w {
				continue
			}
			for d := filepath.Dir(p); d != w && under(d, w); d = filepath.Dir(d) {
				if seen[d] {
					continue
				}
				seen[d] = true
				if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
					out = append(out, d)
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) < len(out[j]) })
	return out
}

// bindSelf mounts the directory d on itself, as it is (with what is
// mounted below it): the same files, writable as before, but a mount point.
func bindSelf(d string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, d, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return fmt.Errorf("clone %s: %w", d, err)
	}
	defer func() { _ = unix.Close(fd) }()
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, d, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("pin %s: %w", d, err)
	}
	return nil
}

// privateTmp mounts a fresh tmpfs on /tmp and the same one on /var/tmp and
// /dev/shm, unless a writable tree is one of them.
func (c nsCall) privateTmp() error {
	for _, w := range c.req.Writable {
		if w == "/tmp" {
			return nil
		}
	}
	if err := unix.Mount("fastagent-tmp", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("private /tmp: %w", err)
	}
	for _, d := range privateDirs[1:] {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() || coveredBy(d, c.req.Writable) {
			continue
		}
		if err := unix.Mount("/tmp", d, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("private %s: %w", d, err)
		}
	}
	return nil
}

// ownTerminals gives the call a /dev/pts of its own (a new devpts
// instance, where the host's /dev/ptmx then makes its pseudo-terminals), so
// that the host's terminals are out of its reach (see hostTerminals); where
// devpts cannot be mounted, an empty cover.
func ownTerminals() error {
	for _, d := range hostTerminals {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		if err := unix.Mount("devpts", d, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err == nil {
			continue
		}
		if _, err := cover(d); err != nil {
			return fmt.Errorf("hide the host's terminals: %w", err)
		}
	}
	return nil
}

// mountKeep puts the cloned tree fd back at path, read-write or read-only,
// creating its mount point when it lies in a fresh tmpfs.
func mountKeep(path string, fd int, rw, dir bool) error {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("mount point %s: %w", path, err)
		}
		if dir {
			err = os.Mkdir(path, 0o755)
		} else {
			var f *os.File
			if f, err = os.Create(path); err == nil {
				err = f.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("mount point %s: %w", path, err)
		}
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	if rw {
		attr = unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("%s read-write: %w", path, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount %s: %w", path, err)
	}
	return nil
}

// proxyPortInNS is where a namespaces-mode call finds the egress proxy: its
// own loopback, in its own network namespace.
const proxyPortInNS = 3128

// listenInNS brings the call's loopback up and listens on it; the proxy
// serves the listener from the helper, whose other threads are in the
// host's network namespace.
func listenInNS() (net.Listener, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("loopback: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return nil, err
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return nil, fmt.Errorf("loopback up: %w", err)
	}
	l, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", proxyPortInNS))
	if err != nil {
		return nil, fmt.Errorf("proxy listener: %w", err)
	}
	return l, nil
}

// lockDown is the last step on the call thread: no new privileges, the
// Landlock domain (rulesetFD ≥ 0), no capabilities, the seccomp filter. It
// returns the filter's listener when signals are supervised, else -1.
func lockDown(rulesetFD int, p filterPolicy) (int, error) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("no_new_privs: %w", err)
	}
	if rulesetFD >= 0 {
		if err := ll.LandlockRestrictSelf(rulesetFD, 0); err != nil {
			return -1, fmt.Errorf("landlock: restrict: %w", err)
		}
	}
	if err := dropCapabilities(); err != nil {
		return -1, err
	}
	return loadFilter(p)
}

// dropCapabilities empties the thread's bounding, ambient, inheritable,
// permitted and effective sets. Without CAP_SETPCAP the bounding set stays
// (no_new_privs already keeps file capabilities and setuid from acting).
func dropCapabilities() error {
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	return nil
}
