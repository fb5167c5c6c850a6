package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
