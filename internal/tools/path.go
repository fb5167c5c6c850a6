package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fastagent/fastagent/agent"
)

// maxLinkDepth bounds the symbolic links followed while resolving a path.
const maxLinkDepth = 40

// workDir checks the call's working directory and returns its real path
// (symbolic links evaluated). A bad Dir is the runtime's fault, not the
// model's, so it is reported as a Go error.
func workDir(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("tools: working directory not set")
	}
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("tools: working directory %q is not absolute", dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("tools: working directory: %w", err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("tools: working directory: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("tools: working directory %s is not a directory", dir)
	}
	return real, nil
}

// within reports whether p is root or below it; both must be clean and
// absolute.
func within(root, p string) bool {
	if p == root {
		return true
	}
	if !strings.HasSuffix(root, string(filepath.Separator)) {
		root += string(filepath.Separator)
	}
	return strings.HasPrefix(p, root)
}

// resolvePath maps p, relative to the working directory dir (whose real path
// is realDir) or absolute, to a real path inside realDir. Symbolic links in
// the existing part of the path are evaluated, so a link inside the
// directory that points outside it is refused. The error is meant for the
// model.
func resolvePath(dir, realDir, p string) (string, error) {
	if p == "" {
		return "", errors.New("path is empty")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	outside := func(extra string) error {
		return fmt.Errorf("path %q is outside the working directory %s%s; only files inside it can be accessed", p, dir, extra)
	}
	var abs string
	if filepath.IsAbs(p) {
		abs = filepath.Clean(p)
		cleanDir := filepath.Clean(dir)
		switch {
		case within(realDir, abs):
		case within(cleanDir, abs):
			rel, err := filepath.Rel(cleanDir, abs)
			if err != nil {
				return "", outside("")
			}
			abs = filepath.Join(realDir, rel)
		default:
			return "", outside("")
		}
	} else {
		abs = filepath.Join(realDir, p)
		if !within(realDir, abs) {
			return "", outside("")
		}
	}
	real, err := evalExisting(abs, 0)
	if err != nil {
		return "", fmt.Errorf("cannot resolve path %q: %w", p, err)
	}
	if !within(realDir, real) {
		return "", outside(fmt.Sprintf(" (it leads to %s through a symbolic link)", real))
	}
	return real, nil
}

// evalExisting evaluates the symbolic links of the longest existing prefix of
// the clean absolute path p and appends the rest. A dangling link at the
// boundary is followed by hand, since writing through it would create its
// target.
func evalExisting(p string, depth int) (string, error) {
	if depth > maxLinkDepth {
		return "", errors.New("too many levels of symbolic links")
	}
	cur := p
	var rest []string
	for {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			if len(rest) == 0 {
				return real, nil
			}
			first := filepath.Join(real, rest[len(rest)-1])
			if fi, lerr := os.Lstat(first); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
				target, err := os.Readlink(first)
				if err != nil {
					return "", err
				}
				if !filepath.IsAbs(target) {
					target = filepath.Join(real, target)
				}
				return evalExisting(joinRest(filepath.Clean(target), rest[:len(rest)-1]), depth+1)
			}
			return joinRest(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p, nil
		}
		rest = append(rest, filepath.Base(cur))
		cur = parent
	}
}

// joinRest appends the components of rest, which are stored innermost first.
func joinRest(base string, rest []string) string {
	parts := make([]string, 0, len(rest)+1)
	parts = append(parts, base)
	for i := len(rest) - 1; i >= 0; i-- {
		parts = append(parts, rest[i])
	}
	return filepath.Join(parts...)
}

// Protected is a path the write and edit tools refuse to change: the path
// itself and, for a directory, everything under it.
type Protected struct {
	// Path is absolute.
	Path string
	// Reason completes "… is protected: " in the refusal the model sees.
	Reason string
	// Secret paths (the state dir, .env) are not readable either: they hold
	// the session database and the operator's secrets.
	Secret bool
	// Dir says the path is a directory; a missing one is created empty (as
	// a file when Dir is false) before a sandboxed tool runs, so that no
	// tool can create it — unless IfExists is set.
	Dir bool
	// IfExists: protect the path only when it exists (it is not read from
	// there, so a tool creating it changes nothing).
	IfExists bool
}

// protectedBy returns the entry of list that covers real (a resolved
// absolute path), comparing both the entry's spelling and its real path.
func protectedBy(list []Protected, real string) (Protected, bool) {
	for _, p := range list {
		clean := filepath.Clean(p.Path)
		if within(clean, real) {
			return p, true
		}
		if r, err := evalExisting(clean, 0); err == nil && within(r, real) {
			return p, true
		}
	}
	return Protected{}, false
}

// refuseProtected returns the error result for a write to a protected path.
func refuseProtected(tool, shown, realDir string, p Protected) agent.ToolResult {
	name := p.Path
	if rel, err := filepath.Rel(realDir, p.Path); err == nil && !strings.HasPrefix(rel, "..") {
		name = filepath.ToSlash(rel)
	}
	return errorResult("%s refused: %s is protected (%s): %s. The agent cannot change its own rules; ask the operator to make this change.",
		tool, shown, name, p.Reason)
}

// beforeOpen, when set (tests only), runs after a tool checked a path and
// before it opens it: the moment a concurrent call could swap a link in.
var beforeOpen func()

func hookBeforeOpen() {
	if beforeOpen != nil {
		beforeOpen()
	}
}

// errChanged reports a path component that changed between the check and
// the open (for example a directory swapped for a symbolic link).
var errChanged = errors.New("the path changed while it was being opened (a symbolic link was swapped in?); nothing was written")

// openForWrite opens rel, a clean path relative to realDir that had no
// symbolic links when it was resolved, without following any symbolic link
// (openBeneath): a link swapped in since fails instead of being followed.
// Missing parents are created when mkdirs is set. create allows a missing
// file to be created (O_EXCL, so a dangling link placed there is not
// followed). The opened file must be a regular file with a single link (a
// hard link may share its contents with a file outside the workspace or
// with a protected one), still inside realDir and not protected.
func openForWrite(realDir, rel string, flag int, create, mkdirs bool, protected []Protected) (*os.File, error) {
	o, err := openBeneath(realDir, rel, flag, create, mkdirs, func(m fs.FileMode, _ *unix.Stat_t) error {
		switch {
		case m.IsDir():
			return errIsDir
		case !m.IsRegular():
			return fmt.Errorf("it is not a regular file (%s)", fileKind(m))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch m := fileMode(o.st.Mode); {
	case m.IsDir():
		o.f.Close()
		return nil, errIsDir
	case !m.IsRegular():
		o.f.Close()
		return nil, fmt.Errorf("it is not a regular file (%s)", fileKind(m))
	case linkCountOf(&o.st) > 1:
		o.f.Close()
		return nil, errHardLink
	}
	if err := checkOpened(o, realDir, protected, func(Protected) bool { return true }); err != nil {
		o.f.Close()
		return nil, err
	}
	return o.f, nil
}

var (
	errIsDir    = errors.New("it is a directory, not a file")
	errHardLink = errors.New("it has more than one hard link, and writing through a hard link could change a file outside the working directory or a protected one; refused")
)

// fileKind names a non-regular file mode for error messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	}
	return "not a regular file"
}
