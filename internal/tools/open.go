package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Every in-process open of a workspace path goes through openBeneath: the
// path was checked by name (resolvePath, protectedBy), so what is opened
// must be exactly that name. No symbolic link is followed on the way —
// neither in a folder of the path (openat2 with RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS where the kernel has it, else
// one O_NOFOLLOW open per folder) nor in the last component (O_NOFOLLOW) —
// the last component is looked at (fstatat, without following) before it
// is opened and the opened file must be that same file, and the opened file
// is checked again by where it is (its path in /proc/self/fd), not by the
// name it was asked for.

// openFlags are added to every open.
const openFlags = unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK

// splitRel splits a clean relative path into its folders and its last
// component, refusing what cannot be a path beneath a directory.
func splitRel(rel string) ([]string, string, error) {
	rel = strings.ReplaceAll(rel, string(os.PathSeparator), "/")
	parts := strings.Split(rel, "/")
	for _, c := range parts {
		if c == "" || c == "." || c == ".." {
			return nil, "", fmt.Errorf("%q is not a clean path inside the working directory", rel)
		}
	}
	return parts[:len(parts)-1], parts[len(parts)-1], nil
}

// openDirBeneath opens the folder dirs (components) beneath the directory
// root without following a symbolic link; with mkdirs, missing folders are
// created (0755). The caller closes the descriptor.
func openDirBeneath(root string, dirs []string, mkdirs bool) (int, error) {
	rootFD, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: root, Err: err}
	}
	if len(dirs) == 0 {
		return rootFD, nil
	}
	if !mkdirs {
		fd, err := openat2Beneath(rootFD, strings.Join(dirs, "/"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
		// ENOTDIR may be a link met with O_DIRECTORY|O_NOFOLLOW: the walk
		// below tells which.
		if !errors.Is(err, errNoOpenat2) && !errors.Is(err, unix.ENOTDIR) {
			_ = unix.Close(rootFD)
			return fd, pathErr(strings.Join(dirs, "/"), err)
		}
	}
	cur := rootFD
	for i, c := range dirs {
		if mkdirs {
			if err := unix.Mkdirat(cur, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				_ = unix.Close(cur)
				return -1, pathErr(strings.Join(dirs[:i+1], "/"), err)
			}
		}
		next, err := unix.Openat(cur, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ENOTDIR) {
			// O_DIRECTORY|O_NOFOLLOW on a link says ENOTDIR: a link it is.
			var st unix.Stat_t
			if unix.Fstatat(cur, c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = unix.ELOOP
			}
		}
		_ = unix.Close(cur)
		if err != nil {
			return -1, pathErr(strings.Join(dirs[:i+1], "/"), err)
		}
		cur = next
	}
	return cur, nil
}

// pathErr turns what a link in the way gives (ELOOP from O_NOFOLLOW or
// RESOLVE_NO_SYMLINKS, EXDEV from RESOLVE_BENEATH) into errChanged: the
// path was resolved without links, so one found now was swapped in.
func pathErr(p string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return errChanged
	}
	return &os.PathError{Op: "open", Path: p, Err: err}
}

// opened is a file opened beneath a directory, with what it was when
// looked at before the open.
type opened struct {
	f  *os.File
	st unix.Stat_t
}

// openBeneath opens rel beneath root with flags (O_RDONLY, O_WRONLY,
// O_RDWR), never through a symbolic link: the last component is looked at
// first (check may refuse it: a directory, a FIFO) and the file opened
// must be the one looked at. With create, a missing file is created
// (O_EXCL, mode 0644); with mkdirs, missing folders too. A missing file
// without create is fs.ErrNotExist.
func openBeneath(root, rel string, flags int, create, mkdirs bool, check func(fs.FileMode, *unix.Stat_t) error) (*opened, error) {
	dirs, base, err := splitRel(rel)
	if err != nil {
		return nil, err
	}
	dfd, err := openDirBeneath(root, dirs, mkdirs)
	if err != nil {
		return nil, err
	}
	defer func() { _ = unix.Close(dfd) }()
	var pre unix.Stat_t
	err = unix.Fstatat(dfd, base, &pre, unix.AT_SYMLINK_NOFOLLOW)
	var fd int
	switch {
	case errors.Is(err, unix.ENOENT):
		if !create {
			return nil, &os.PathError{Op: "open", Path: rel, Err: fs.ErrNotExist}
		}
		fd, err = unix.Openat(dfd, base, flags|openFlags|unix.O_CREAT|unix.O_EXCL, 0o644)
		if err != nil {
			return nil, pathErr(rel, err)
		}
		if err := unix.Fstat(fd, &pre); err != nil {
			_ = unix.Close(fd)
			return nil, &os.PathError{Op: "stat", Path: rel, Err: err}
		}
	case err != nil:
		return nil, &os.PathError{Op: "stat", Path: rel, Err: err}
	default:
		mode := fileMode(pre.Mode)
		if mode&fs.ModeSymlink != 0 {
			return nil, errChanged
		}
		if check != nil {
			if err := check(mode, &pre); err != nil {
				return nil, err
			}
		}
		fd, err = unix.Openat(dfd, base, flags|openFlags, 0)
		if err != nil {
			return nil, pathErr(rel, err)
		}
	}
	f := os.NewFile(uintptr(fd), rel) //nolint:gosec // G115: a descriptor
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "stat", Path: rel, Err: err}
	}
	if st.Dev != pre.Dev || st.Ino != pre.Ino {
		f.Close()
		return nil, errChanged
	}
	return &opened{f: f, st: st}, nil
}

// fileMode converts a stat mode's type bits (uint16 on some systems).
func fileMode[T uint16 | uint32](mode T) fs.FileMode {
	switch uint32(mode) & unix.S_IFMT {
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	}
	return 0
}

// checkOpened checks the opened file by where it is now: inside realDir
// and not covered by an entry of list that refuse says no to (a secret one
// for reading, any for writing). Where the kernel does not say (no /proc),
// the name checked before the open and the link-free open stand.
func checkOpened(o *opened, realDir string, list []Protected, refuse func(Protected) bool) error {
	where, ok := openedPath(o.f)
	if !ok {
		return nil
	}
	if !within(realDir, where) {
		return errChanged
	}
	if p, ok := protectedBy(list, where); ok && refuse(p) {
		return errChanged
	}
	return nil
}

// linkCountOf is the number of hard links of a stat.
func linkCountOf(st *unix.Stat_t) uint64 { return uint64(st.Nlink) } //nolint:unconvert // Nlink is uint32 on some platforms
